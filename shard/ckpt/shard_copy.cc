#include "shard/ckpt/shard_copy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "shard/ckpt/copy_header.h"
#include "shard/ckpt/copy_peers.h"
#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/common/owned_dir.h"
#include "shard/common/logging.h"

namespace shard {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kPut = kCopyPut, kGet = kCopyGet;
constexpr uint8_t kOk = 0, kNotHere = 1, kError = 2;
constexpr uint64_t kMaxFile = uint64_t{1} << 40;  // 1 TiB: a size beyond is a broken peer

std::string Err() { return std::strerror(errno); }

// "host:port#key" → host:port and key (an endpoint without a key has none).
std::pair<std::string, std::string> SplitEndpoint(const std::string& endpoint) {
  const size_t hash = endpoint.rfind('#');
  if (hash == std::string::npos) return {endpoint, ""};
  return {endpoint.substr(0, hash), endpoint.substr(hash + 1)};
}

StatusOr<std::string> RandomKey() {
  unsigned char bytes[16];
  if (::getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes)))
    return Internal("partner copy server: getrandom: " + Err());
  return BytesToHex(bytes, sizeof(bytes));
}

// Compares without an early exit, so the time taken says nothing of the key.
bool SameKey(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Bytes free to an unprivileged writer in the filesystem that holds `path`
// (its nearest existing ancestor: the step folder may not exist yet).
uint64_t FreeBytes(fs::path path) {
  std::error_code ec;
  while (!path.empty() && !fs::exists(path, ec)) path = path.parent_path();
  struct statvfs st{};
  if (path.empty() || ::statvfs(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

// A client waits this long at most for the server's first answer (the
// server reads a header within its header deadline, then answers at once).
constexpr auto kClientHandshake = std::chrono::seconds(10);

// One socket with a deadline for everything done on it.
class Conn {
 public:
  Conn(int fd, Clock::time_point deadline, std::string peer) : fd_(fd), deadline_(deadline), peer_(std::move(peer)) {}
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  void SetDeadline(Clock::time_point d) { deadline_ = d; }
  // Up to `size` bytes, as many as one recv gives (at least one).
  StatusOr<size_t> RecvSome(void* data, size_t size) {
    while (true) {
      RETURN_IF_ERROR(Wait(POLLIN));
      const ssize_t n = ::recv(fd_, data, size, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n == 0) return Unavailable("partner copy with " + peer_ + ": the peer closed the connection");
      if (n < 0) return Unavailable("partner copy with " + peer_ + ": recv: " + Err());
      return static_cast<size_t>(n);
    }
  }
  Status Wait(short events) {
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) return DeadlineExceeded("partner copy with " + peer_ + ": timed out");
      pollfd p{fd_, events, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
      if (n > 0) return OkStatus();
      if (n < 0 && errno != EINTR) return Unavailable("partner copy with " + peer_ + ": poll: " + Err());
    }
  }
  Status Send(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      RETURN_IF_ERROR(Wait(POLLOUT));
      const ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return Unavailable("partner copy to " + peer_ + ": send: " + Err());
      p += n;
      size -= static_cast<size_t>(n);
    }
    return OkStatus();
  }
  Status Recv(void* data, size_t size) {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      RETURN_IF_ERROR(Wait(POLLIN));
      const ssize_t n = ::recv(fd_, p, size, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n == 0) return Unavailable("partner copy with " + peer_ + ": the peer closed the connection");
      if (n < 0) return Unavailable("partner copy with " + peer_ + ": recv: " + Err());
      p += n;
      size -= static_cast<size_t>(n);
    }
    return OkStatus();
  }
  template <typename T>
  Status Put(T v) { return Send(&v, sizeof(v)); }
  template <typename T>
  StatusOr<T> Get() {
    T v{};
    RETURN_IF_ERROR(Recv(&v, sizeof(v)));
    return v;
  }
  Status PutString(const std::string& s) {
    RETURN_IF_ERROR(Put<uint16_t>(static_cast<uint16_t>(s.size())));
    return Send(s.data(), s.size());
  }
  StatusOr<std::string> GetString() {
    ASSIGN_OR_RETURN(uint16_t n, Get<uint16_t>());
    std::string s(n, '\0');
    RETURN_IF_ERROR(Recv(s.data(), n));
    return s;
  }
  const std::string& peer() const { return peer_; }

 private:
  int fd_;
  Clock::time_point deadline_;
  std::string peer_;
};

StatusOr<std::unique_ptr<Conn>> Dial(const std::string& addr, std::chrono::milliseconds timeout) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("partner copy address '" + addr + "' is not host:port");
  const std::string host = addr.substr(0, colon), port = addr.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Unavailable("partner copy: cannot resolve " + addr + ": " + gai_strerror(rc));
  const auto deadline = Clock::now() + timeout;
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    ::freeaddrinfo(res);
    return Unavailable("partner copy: socket: " + Err());
  }
  auto conn = std::make_unique<Conn>(fd, deadline, addr);
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (rc != 0 && errno != EINPROGRESS) return Unavailable("partner copy: cannot connect to " + addr + ": " + Err());
  if (rc != 0) {
    RETURN_IF_ERROR(conn->Wait(POLLOUT));
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Unavailable("partner copy: cannot connect to " + addr + ": " + std::strerror(err));
  }
  return conn;
}

Status SendHeader(Conn& c, const std::string& key, uint8_t op, const std::string& step, const std::string& name,
                  uint64_t size = 0, uint64_t xxh64 = 0) {
  CopyHeader h;
  h.key = key;
  h.op = op;
  h.step = step;
  h.name = name;
  h.size = size;
  h.xxh64 = xxh64;
  const std::string bytes = EncodeCopyHeader(h);
  return c.Send(bytes.data(), bytes.size());
}

// Reads one request header within the connection's deadline (the header
// deadline: a stranger's idle socket is closed after it).
StatusOr<CopyHeaderParse> ReadHeader(Conn& c) {
  std::string buf;
  char chunk[512];
  while (true) {
    const size_t room = std::min(sizeof(chunk), kMaxCopyHeader - buf.size());
    ASSIGN_OR_RETURN(size_t n, c.RecvSome(chunk, std::max<size_t>(room, 1)));
    buf.append(chunk, n);
    CopyHeaderParse p = ParseCopyHeader(buf);
    if (p.state == CopyHeaderParse::kDone && p.used != buf.size()) {
      p.state = CopyHeaderParse::kBad;
      p.error = "bytes after the request header, before the go-ahead";
    }
    if (p.state != CopyHeaderParse::kNeedMore) return p;
    if (buf.size() >= kMaxCopyHeader) return InvalidArgument("partner copy header longer than its cap");
  }
}

Status Reply(Conn& c, uint8_t code, const std::string& msg) {
  RETURN_IF_ERROR(c.Put<uint8_t>(code));
  return c.PutString(msg.substr(0, 1000));
}

}  // namespace

ShardCopyServer::ShardCopyServer(std::string root, std::function<void(const std::string&)> on_put)
    : root_(std::move(root)), on_put_(std::move(on_put)) {}

ShardCopyServer::~ShardCopyServer() { Stop(); }

Status ShardCopyServer::Start(const std::string& bind_host, std::chrono::milliseconds io_timeout) {
  ShardCopyServerOptions o;
  o.io_timeout = io_timeout;
  return Start(bind_host, o);
}

Status ShardCopyServer::Start(const std::string& bind_host, const ShardCopyServerOptions& options) {
  io_timeout_ = options.io_timeout;
  header_timeout_ = options.header_timeout;
  max_copies_ = options.max_copies;
  conns_ = CopyConnections(options.max_connections, options.max_per_peer, options.max_copies);
  ASSIGN_OR_RETURN(key_, RandomKey());
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(bind_host.c_str(), "0", &hints, &res); rc != 0)
    return Unavailable("partner copy server: cannot resolve " + bind_host + ": " + gai_strerror(rc));
  listen_fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (listen_fd_ >= 0) ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = listen_fd_ >= 0 && ::bind(listen_fd_, res->ai_addr, res->ai_addrlen) == 0 &&
                     ::listen(listen_fd_, 16) == 0;
  ::freeaddrinfo(res);
  if (!bound) {
    const std::string err = Err();
    Stop();
    return Unavailable("partner copy server: cannot listen on " + bind_host + ": " + err);
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  char ip[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
    port = ntohs(a->sin6_port);
    address_ = "[" + std::string(ip) + "]:" + std::to_string(port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    port = ntohs(a->sin_port);
    address_ = std::string(ip) + ":" + std::to_string(port);
  }
  stop_ = false;
  thread_ = std::thread([this] { Serve(); });
  return OkStatus();
}

namespace {

void ServeGet(Conn& c, const CopyHeader& h, const std::string& root) {
  const std::string path = (fs::path(root) / h.step / h.name).string();
  auto data = ReadFileToString(path);
  if (!data.ok()) {
    (void)Reply(c, kNotHere, path + " is not on this host");
    return;
  }
  if (!Reply(c, kOk, "").ok() || !c.Put<uint64_t>(data->size()).ok() ||
      !c.Put<uint64_t>(Xxh64(data->data(), data->size())).ok())
    return;
  (void)c.Send(data->data(), data->size());
}

// true once the file is stored (the caller sends the last answer).
bool ServePut(Conn& c, const CopyHeader& h, const std::string& root) {
  const fs::path dir = fs::path(root) / h.step;
  const std::string path = (dir / h.name).string();
  // Refused before a byte is taken (tmpfs is the host's memory); the caller
  // sends the bytes only after this go-ahead.
  if (const uint64_t free = std::min(FreeBytes(dir), kMaxFile); h.size > free) {
    (void)Reply(c, kError, "no room for " + h.step + "/" + h.name + ": " + std::to_string(h.size) + " bytes, " +
                               std::to_string(free) + " free under " + root);
    return false;
  }
  if (!Reply(c, kOk, "").ok()) return false;
  std::string data(h.size, '\0');
  if (!c.Recv(data.data(), data.size()).ok()) return false;
  if (Xxh64(data.data(), data.size()) != h.xxh64) {
    (void)Reply(c, kError, "the bytes of " + h.step + "/" + h.name + " arrived damaged (xxh64 mismatch)");
    return false;
  }
  // The host's folder and the step's: the user's own, 0700, never a link (owned_dir.h).
  auto host = OwnedDir::OpenUnderParent(root, /*create=*/true);
  Status st = host.ok() ? host->Sub(dir.filename().string(), /*create=*/true).status() : host.status();
  if (st.ok()) st = WriteFileAtomicShared(path, data);
  if (!st.ok()) {
    LOG_WARN("partner copy: {}", st.ToString());
    (void)Reply(c, kError, st.message());
    return false;
  }
  return true;
}

}  // namespace

void ShardCopyServer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  // Wake every connection still served and wait for their threads.
  std::unique_lock<std::mutex> lock(mu_);
  conns_.ForEachFd([](int fd) { ::shutdown(fd, SHUT_RDWR); });
  idle_.wait(lock, [this] { return active_ == 0; });
}

int ShardCopyServer::evicted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return conns_.evicted();
}

int ShardCopyServer::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return conns_.open();
}

// Accepts, admits under the caps (copy_peers.h) and serves each connection
// on a thread of its own: a slow or idle one never holds up the next.
void ShardCopyServer::Serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    sockaddr_storage from{};
    socklen_t len = sizeof(from);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    const std::string peer = CopyPeerOf(from);
    std::unique_lock<std::mutex> lock(mu_);
    const CopyConnections::Admission a = conns_.Admit(peer, fd);
    if (a.evict_fd >= 0) ::shutdown(a.evict_fd, SHUT_RDWR);  // its thread sees EOF, closes and leaves
    ++active_;
    lock.unlock();
    std::thread([this, fd, id = a.id, peer] {
      Handle(fd, id, peer);
      std::lock_guard<std::mutex> done(mu_);
      conns_.Release(id);
      ::close(fd);
      --active_;
      idle_.notify_all();  // under the lock: Stop may destroy *this once it sees active_ == 0
    }).detach();
  }
}

void ShardCopyServer::Handle(int fd, uint64_t id, const std::string& peer) {
  const int own = ::dup(fd);  // Conn closes its own; the serving thread closes fd after Release
  if (own < 0) return;
  Conn c(own, Clock::now() + std::min(header_timeout_, io_timeout_), peer);
  auto parsed = ReadHeader(c);
  if (!parsed.ok()) return;  // idle past the header deadline, closed, or evicted
  if (parsed->state == CopyHeaderParse::kBad) {
    if (parsed->answer) (void)Reply(c, kError, parsed->error);
    return;
  }
  const CopyHeader& h = parsed->header;
  if (!SameKey(h.key, key_)) {
    (void)Reply(c, kError, "wrong partner-copy key (not from this attempt's rendezvous store)");
    return;
  }
  bool keyed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keyed = conns_.MarkKeyed(id);
  }
  if (!keyed) {
    (void)Reply(c, kError, "partner copy server busy: " + std::to_string(max_copies_) + " copies in progress");
    return;
  }
  c.SetDeadline(Clock::now() + io_timeout_);
  if (!ValidCopyStepName(h.step) || !ValidCopyFileName(h.name)) {
    (void)Reply(c, kError, "refused name " + h.step + "/" + h.name);
    return;
  }
  if (h.op == kGet) {
    ServeGet(c, h, root_);
    return;
  }
  if (!ServePut(c, h, root_)) return;
  ++received_;
  if (on_put_) {
    std::lock_guard<std::mutex> lock(put_mu_);  // the host's retention: one at a time
    on_put_((fs::path(root_) / h.step).string());
  }
  (void)Reply(c, kOk, "");
}


Status WriteFileAtomicShared(const std::string& path, const std::string& data) {
  static std::atomic<uint64_t> counter{0};
  const std::string mine = path + ".part" + std::to_string(::getpid()) + "." + std::to_string(++counter);
  RETURN_IF_ERROR(WriteFileAtomic(mine, data));
  if (::rename(mine.c_str(), path.c_str()) != 0) {
    const std::string err = Err();
    ::unlink(mine.c_str());
    return DataLoss("rename " + mine + " -> " + path + " failed: " + err);
  }
  return FsyncDir(fs::path(path).parent_path().string());
}

Status PutShardFile(const std::string& endpoint, const std::string& step_name, const std::string& path,
                    std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
  const std::string name = fs::path(path).filename().string();
  const auto [addr, key] = SplitEndpoint(endpoint);
  const auto end = Clock::now() + timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<Conn> c, Dial(addr, std::min<std::chrono::milliseconds>(timeout, kClientHandshake)));
  RETURN_IF_ERROR(SendHeader(*c, key, kPut, step_name, name, data.size(), Xxh64(data.data(), data.size())));
  // Two answers: the go-ahead (key, names, room), then whether it landed.
  for (bool sent = false;; sent = true) {
    ASSIGN_OR_RETURN(uint8_t code, c->Get<uint8_t>());
    ASSIGN_OR_RETURN(std::string msg, c->GetString());
    if (code != kOk) return Unavailable("partner copy of " + step_name + "/" + name + " to " + addr + ": " + msg);
    if (sent) return OkStatus();
    c->SetDeadline(end);
    RETURN_IF_ERROR(c->Send(data.data(), data.size()));
  }
}

StatusOr<bool> FetchShardFile(const std::string& endpoint, const std::string& step_name, const std::string& name,
                              const std::string& dest_dir, uint64_t size, uint64_t xxh64,
                              std::chrono::milliseconds timeout) {
  const auto [addr, key] = SplitEndpoint(endpoint);
  const auto end = Clock::now() + timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<Conn> c, Dial(addr, std::min<std::chrono::milliseconds>(timeout, kClientHandshake)));
  RETURN_IF_ERROR(SendHeader(*c, key, kGet, step_name, name));
  ASSIGN_OR_RETURN(uint8_t code, c->Get<uint8_t>());
  ASSIGN_OR_RETURN(std::string msg, c->GetString());
  c->SetDeadline(end);
  if (code == kNotHere) return false;
  if (code != kOk) return Unavailable("fetching " + step_name + "/" + name + " from " + addr + ": " + msg);
  ASSIGN_OR_RETURN(uint64_t got_size, c->Get<uint64_t>());
  ASSIGN_OR_RETURN(uint64_t got_hash, c->Get<uint64_t>());
  if (got_size != size || got_hash != xxh64)
    return DataLoss("fetching " + step_name + "/" + name + " from " + addr + ": the peer holds " +
                    std::to_string(got_size) + " bytes (xxh64 " + HashToHex(got_hash) + "), the commit recorded " +
                    std::to_string(size) + " (" + HashToHex(xxh64) + ")");
  std::string data(size, '\0');
  RETURN_IF_ERROR(c->Recv(data.data(), data.size()));
  if (Xxh64(data.data(), data.size()) != xxh64)
    return DataLoss("fetching " + step_name + "/" + name + " from " + addr + ": the bytes arrived damaged");
  std::error_code ec;
  fs::create_directories(dest_dir, ec);
  if (ec) return DataLoss("cannot create " + dest_dir + ": " + ec.message());
  RETURN_IF_ERROR(WriteFileAtomicShared((fs::path(dest_dir) / name).string(), data));
  return true;
}

}  // namespace shard
