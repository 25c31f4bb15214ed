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
#include <regex>
#include <vector>

#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/common/owned_dir.h"
#include "shard/common/logging.h"

namespace shard {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[4] = {'S', 'H', 'C', 'P'};
constexpr uint32_t kVersion = 2;  // 2: the endpoint's key follows the version
constexpr uint8_t kPut = 1, kGet = 2;
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
  static const char* kHex = "0123456789abcdef";
  std::string key;
  for (unsigned char b : bytes) key += {kHex[b >> 4], kHex[b & 15]};
  return key;
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

bool ValidStepName(const std::string& s) { return std::regex_match(s, std::regex("step_[0-9]{8}")); }
bool ValidFileName(const std::string& s) {
  return !s.empty() && s.size() < 200 && s[0] != '.' && std::regex_match(s, std::regex("[A-Za-z0-9._-]+"));
}

// One socket with a deadline for everything done on it.
class Conn {
 public:
  Conn(int fd, Clock::time_point deadline, std::string peer) : fd_(fd), deadline_(deadline), peer_(std::move(peer)) {}
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
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

Status SendHeader(Conn& c, const std::string& key, uint8_t op, const std::string& step, const std::string& name) {
  RETURN_IF_ERROR(c.Send(kMagic, 4));
  RETURN_IF_ERROR(c.Put<uint32_t>(kVersion));
  RETURN_IF_ERROR(c.PutString(key));
  RETURN_IF_ERROR(c.Put<uint8_t>(op));
  RETURN_IF_ERROR(c.PutString(step));
  return c.PutString(name);
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
  io_timeout_ = io_timeout;
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

void ShardCopyServer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void ShardCopyServer::Serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    Handle(fd);  // one at a time: copies are few and each has a deadline
  }
}

void ShardCopyServer::Handle(int fd) {
  Conn c(fd, Clock::now() + io_timeout_, "a peer");
  char magic[4];
  auto version = [&]() -> StatusOr<uint32_t> {
    RETURN_IF_ERROR(c.Recv(magic, 4));
    if (std::memcmp(magic, kMagic, 4) != 0) return InvalidArgument("not a partner copy request");
    return c.Get<uint32_t>();
  }();
  if (!version.ok()) return;
  if (*version != kVersion) {
    (void)Reply(c, kError, "partner copy version " + std::to_string(*version) + " not spoken (this worker: " +
                               std::to_string(kVersion) + ")");
    return;
  }
  // The whole header is read before any answer: closing a socket with bytes
  // unread resets the connection, and the caller would lose the answer.
  auto key = c.GetString();
  auto op = key.ok() ? c.Get<uint8_t>() : StatusOr<uint8_t>(key.status());
  auto step = op.ok() ? c.GetString() : StatusOr<std::string>(op.status());
  auto name = step.ok() ? c.GetString() : StatusOr<std::string>(step.status());
  if (!name.ok()) return;
  uint64_t size = 0, hash = 0;
  if (*op == kPut) {
    auto sz = c.Get<uint64_t>();
    auto h = sz.ok() ? c.Get<uint64_t>() : StatusOr<uint64_t>(sz.status());
    if (!h.ok()) return;
    size = *sz;
    hash = *h;
  }
  if (!SameKey(*key, key_)) {
    (void)Reply(c, kError, "wrong partner-copy key (not from this attempt's rendezvous store)");
    return;
  }
  if (!ValidStepName(*step) || !ValidFileName(*name)) {
    (void)Reply(c, kError, "refused name " + *step + "/" + *name);
    return;
  }
  const fs::path dir = fs::path(root_) / *step;
  const std::string path = (dir / *name).string();
  if (*op == kGet) {
    auto data = ReadFileToString(path);
    if (!data.ok()) {
      (void)Reply(c, kNotHere, path + " is not on this host");
      return;
    }
    if (!Reply(c, kOk, "").ok() || !c.Put<uint64_t>(data->size()).ok() ||
        !c.Put<uint64_t>(Xxh64(data->data(), data->size())).ok())
      return;
    (void)c.Send(data->data(), data->size());
    return;
  }
  if (*op != kPut) {
    (void)Reply(c, kError, "unknown operation " + std::to_string(*op));
    return;
  }
  // Refused before a byte is taken (tmpfs is the host's memory); the caller
  // sends the bytes only after this go-ahead.
  if (const uint64_t free = std::min(FreeBytes(dir), kMaxFile); size > free) {
    (void)Reply(c, kError, "no room for " + *step + "/" + *name + ": " + std::to_string(size) + " bytes, " +
                               std::to_string(free) + " free under " + root_);
    return;
  }
  if (!Reply(c, kOk, "").ok()) return;
  std::string data(size, '\0');
  if (!c.Recv(data.data(), data.size()).ok()) return;
  if (Xxh64(data.data(), data.size()) != hash) {
    (void)Reply(c, kError, "the bytes of " + *step + "/" + *name + " arrived damaged (xxh64 mismatch)");
    return;
  }
  // The host's folder and the step's: the user's own, 0700, never a link (owned_dir.h).
  auto host = OwnedDir::OpenUnderParent(root_, /*create=*/true);
  Status st = host.ok() ? host->Sub(dir.filename().string(), /*create=*/true).status() : host.status();
  if (st.ok()) st = WriteFileAtomicShared(path, data);
  if (!st.ok()) {
    LOG_WARN("partner copy: {}", st.ToString());
    (void)Reply(c, kError, st.message());
    return;
  }
  ++received_;
  if (on_put_) on_put_(dir.string());
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
  ASSIGN_OR_RETURN(std::unique_ptr<Conn> c, Dial(addr, timeout));
  RETURN_IF_ERROR(SendHeader(*c, key, kPut, step_name, name));
  RETURN_IF_ERROR(c->Put<uint64_t>(data.size()));
  RETURN_IF_ERROR(c->Put<uint64_t>(Xxh64(data.data(), data.size())));
  // Two answers: the go-ahead (key, names, room), then whether it landed.
  for (bool sent = false;; sent = true) {
    ASSIGN_OR_RETURN(uint8_t code, c->Get<uint8_t>());
    ASSIGN_OR_RETURN(std::string msg, c->GetString());
    if (code != kOk) return Unavailable("partner copy of " + step_name + "/" + name + " to " + addr + ": " + msg);
    if (sent) return OkStatus();
    RETURN_IF_ERROR(c->Send(data.data(), data.size()));
  }
}

StatusOr<bool> FetchShardFile(const std::string& endpoint, const std::string& step_name, const std::string& name,
                              const std::string& dest_dir, uint64_t size, uint64_t xxh64,
                              std::chrono::milliseconds timeout) {
  const auto [addr, key] = SplitEndpoint(endpoint);
  ASSIGN_OR_RETURN(std::unique_ptr<Conn> c, Dial(addr, timeout));
  RETURN_IF_ERROR(SendHeader(*c, key, kGet, step_name, name));
  ASSIGN_OR_RETURN(uint8_t code, c->Get<uint8_t>());
  ASSIGN_OR_RETURN(std::string msg, c->GetString());
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
