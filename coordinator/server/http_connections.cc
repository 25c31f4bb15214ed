#include "coordinator/server/http_connections.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

#include "shard/common/logging.h"

namespace shardd {

using Clock = std::chrono::steady_clock;

namespace {

// "1.2.3.4", "::1"; IPv4-mapped IPv6 addresses as their IPv4 form, so one
// host is one peer whichever family it connects with.
std::string AddressOf(const sockaddr_storage& addr, socklen_t len, int* port) {
  char host[NI_MAXHOST] = "";
  char serv[NI_MAXSERV] = "";
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  if (port) *port = std::atoi(serv);
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos) h = h.substr(7);
  return h;
}

std::string PeerOf(int sock, int* port = nullptr) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  return AddressOf(addr, len, port);
}

// Milliseconds until `t` (0 when past), at most cap_ms.
int MsUntil(Clock::time_point t, int cap_ms) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, cap_ms));
}

bool PollFor(int sock, short events, int timeout_ms) {
  pollfd p{sock, events, 0};
  int r;
  do r = ::poll(&p, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  return r > 0;
}

// An httplib::Stream over a socket whose reads stop at a deadline for the
// request (line, headers and the small bodies this server takes), besides the per-read timeout (httplib's SocketStream has
// only the latter). Buffered, since httplib reads request lines bytewise. It
// tells `on_headers` once the consumer has read a blank line (the headers'
// end): from then on the connection is serving.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int sock, Clock::time_point deadline, int read_timeout_ms, int write_timeout_ms,
                 std::function<void()> on_headers)
      : sock_(sock), deadline_(deadline), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms),
        on_headers_(std::move(on_headers)) {}

  // The next request on the connection: its headers get a fresh deadline.
  void NextRequest(Clock::time_point deadline) {
    deadline_ = deadline;
    headers_done_ = false;
    match_ = 0;
  }
  // Bytes of a next (pipelined) request already read from the socket.
  bool buffered() const { return pos_ < buf_.size(); }

  bool is_readable() const override {
    if (pos_ < buf_.size()) return true;
    // The deadline covers the small bodies this server takes too.
    if (Clock::now() < deadline_ && PollFor(sock_, POLLIN, MsUntil(deadline_, read_timeout_ms_))) return true;
    timed_out_ = true;
    return false;
  }
  // A read ran into the deadline or the read timeout: the connection ends
  // (httplib would answer 400 and wait for the next request on it).
  bool timed_out() const { return timed_out_; }
  bool is_writable() const override { return PollFor(sock_, POLLOUT, write_timeout_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == buf_.size()) {
      if (!is_readable()) return -1;  // past the deadline, or the read timed out
      buf_.resize(4096);
      ssize_t n;
      do n = ::recv(sock_, buf_.data(), buf_.size(), 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) {
        buf_.clear();
        pos_ = 0;
        return n;
      }
      buf_.resize(static_cast<size_t>(n));
      pos_ = 0;
    }
    const size_t n = std::min(size, buf_.size() - pos_);
    std::memcpy(ptr, buf_.data() + pos_, n);
    pos_ += n;
    if (!headers_done_) Scan(ptr, n);
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = PeerOf(sock_, &port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip = AddressOf(addr, len, &port);
  }
  socket_t socket() const override { return sock_; }

 private:
  // Follows "\r\n\r\n" (or "\n\n") across reads; calls on_headers_ at its end.
  void Scan(const char* p, size_t n) {
    for (size_t i = 0; i < n && !headers_done_; ++i) {
      const char c = p[i];
      if (c == '\n') {
        match_ = match_ >= 1 ? 4 : 1;  // a newline after a newline (and an optional \r): a blank line
      } else if (c != '\r') {
        match_ = 0;
      }
      if (match_ == 4) {
        headers_done_ = true;
        if (on_headers_) on_headers_();
      }
    }
  }

  const int sock_;
  Clock::time_point deadline_;
  const int read_timeout_ms_;
  const int write_timeout_ms_;
  std::function<void()> on_headers_;
  std::string buf_;
  size_t pos_ = 0;
  bool headers_done_ = false;
  int match_ = 0;  // 1: at a line's start after a newline
  mutable bool timed_out_ = false;
};

std::chrono::milliseconds Ms(double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }

// Whether whole request headers wait unread in the socket (a prompt client
// the server has not read yet): a look at its first 8 KiB, never blocking.
bool HeadersWaiting(int sock) {
  char buf[8192];
  const ssize_t n = ::recv(sock, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  if (n <= 0) return false;
  const std::string_view s(buf, static_cast<size_t>(n));
  return s.find("\r\n\r\n") != std::string_view::npos || s.find("\n\n") != std::string_view::npos;
}

}  // namespace

// httplib's accept loop hands each accepted socket to a TaskQueue; this one
// runs the hand-off (our process_and_close_socket) right there, on the
// accept thread, so admission happens before the connection costs anything.
class InlineTaskQueue final : public httplib::TaskQueue {
 public:
  explicit InlineTaskQueue(GuardedHttpServer* server) : server_(server) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { server_->ShutdownPool(); }

 private:
  GuardedHttpServer* server_;
};

GuardedHttpServer::GuardedHttpServer(const ConnectionLimits& limits)
    : limits_(limits), table_(std::max(1, limits.per_peer), std::max(1, limits.max_connections)) {
  new_task_queue = [this] { return new InlineTaskQueue(this); };
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  for (int i = 0; i < std::max(1, limits_.threads); ++i) threads_.emplace_back([this] { Worker(); });
  waiting_room_ = std::thread([this] { WaitingRoom(); });
}

GuardedHttpServer::~GuardedHttpServer() {
  ShutdownPool();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

size_t GuardedHttpServer::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

size_t GuardedHttpServer::evicted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evicted_;
}

bool GuardedHttpServer::RaiseListenBacklog(int backlog) {
  const socket_t sock = svr_sock_;
  return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
}

void GuardedHttpServer::Wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
}

void GuardedHttpServer::Close(socket_t sock) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.Release(sock);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  const std::string peer = PeerKey(PeerOf(sock));
  ConnectionTable::Admission a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A connection a thread reads has consumed its bytes: the thread marks it
    // serving at its headers' end. The others are looked at unread.
    if (!stopping_)
      a = table_.Admit(sock, peer, [this](int fd) { return !serving_.count(fd) && HeadersWaiting(fd); });
    if (a.evicted >= 0) {
      // Still open (its owner releases it before closing, under this lock):
      // the owner, the waiting room or a thread reading its headers, sees the
      // shutdown at once and closes it.
      ::shutdown(a.evicted, SHUT_RDWR);
      ++evicted_;
    }
    if (a.admitted) waiting_.push_back({sock, Clock::now() + Ms(limits_.header_timeout_s), keep_alive_max_count_, true});
  }
  if (!a.admitted) {
    Refuse(sock, a.reason.empty() ? std::string("the server is stopping") : a.reason);
    return false;
  }
  if (a.evicted >= 0) LOG_DEBUG("shardd HTTP: evicted a connection still in its headers ({})", a.reason);
  Wake();
  return true;
}

void GuardedHttpServer::Refuse(socket_t sock, const std::string& why) {
  const std::string body = "too many connections: " + why + "\n";
  const std::string reply = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  // Best effort and never blocking: this is the accept thread.
  (void)::send(sock, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
  // Take what the request sent so far, so close() does not reset the
  // connection before the client has read the 503.
  char sink[8192];
  (void)::recv(sock, sink, sizeof(sink), MSG_DONTWAIT);
  ::close(sock);
  bool log = false;
  size_t refused = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    refused = ++refused_;
    const auto now = Clock::now();
    if (now - last_refusal_log_ > std::chrono::seconds(10)) {
      last_refusal_log_ = now;
      log = true;
    }
  }
  if (log) LOG_WARN("shardd HTTP: refused a connection ({}); {} refused since start", why, refused);
}

// One thread polls every connection that waits for a request: the first
// bytes move it to the ready queue, its deadline (or an eviction) closes it.
void GuardedHttpServer::WaitingRoom() {
  std::vector<pollfd> fds;
  std::vector<socket_t> to_close;
  while (true) {
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    int timeout_ms = 1000;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
      for (const Pending& p : waiting_) {
        fds.push_back({p.sock, POLLIN, 0});
        timeout_ms = std::min(timeout_ms, MsUntil(p.deadline, 1000) + 1);
      }
    }
    int r;
    do r = ::poll(fds.data(), fds.size(), timeout_ms);
    while (r < 0 && errno == EINTR);
    uint64_t drained;
    if (fds[0].revents) (void)!::read(wake_fd_, &drained, sizeof drained);
    std::set<socket_t> woke;
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) woke.insert(fds[i].fd);
    const auto now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        Pending p = *it;
        if (woke.count(p.sock) && !table_.evicted(p.sock)) {
          // A kept-alive connection's next request has the full header time.
          if (!p.fresh) p.deadline = now + Ms(limits_.header_timeout_s);
          ready_.push_back(p);
          cv_.notify_one();
        } else if (woke.count(p.sock) || now >= p.deadline) {
          to_close.push_back(p.sock);  // evicted, or no (next) request in time
        } else {
          ++it;
          continue;
        }
        it = waiting_.erase(it);
      }
    }
    for (socket_t s : to_close) Close(s);
    to_close.clear();
  }
  std::vector<Pending> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(waiting_);
  }
  for (const Pending& p : left) Close(p.sock);
}

void GuardedHttpServer::Worker() {
  while (true) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
      if (ready_.empty()) return;  // stopping, nothing left
      p = ready_.front();
      ready_.pop_front();
      if (!stopping_ && !table_.evicted(p.sock)) {
        serving_.insert(p.sock);
        ++busy_;
      } else {
        lock.unlock();
        Close(p.sock);
        continue;
      }
    }
    const bool keep = Serve(&p);
    {
      std::lock_guard<std::mutex> lock(mu_);
      serving_.erase(p.sock);
      --busy_;
      if (keep && !stopping_ && !table_.evicted(p.sock)) {
        // Back to the waiting room: an idle kept-alive connection holds no thread.
        table_.AwaitingRequest(p.sock);
        waiting_.push_back({p.sock, Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_), p.requests_left,
                            false});
        Wake();
        continue;
      }
    }
    Close(p.sock);
  }
}

bool GuardedHttpServer::Serve(Pending* p) {
  const int read_ms = static_cast<int>(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000);
  const int write_ms = static_cast<int>(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000);
  const socket_t sock = p->sock;
  auto deadline = [&](Clock::time_point d) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool busy = limits_.threads - busy_ < limits_.reserve;
    return busy ? std::min(d, Clock::now() + Ms(limits_.busy_header_timeout_s)) : d;
  };
  DeadlineStream strm(sock, deadline(p->deadline), read_ms, write_ms, [this, sock] {
    std::lock_guard<std::mutex> lock(mu_);
    table_.Serving(sock);
  });
  while (p->requests_left > 0 && svr_sock_ != INVALID_SOCKET) {
    bool connection_closed = false;
    const bool ok = process_request(strm, /*close_connection=*/p->requests_left == 1, connection_closed, nullptr);
    --p->requests_left;
    if (!ok || connection_closed || strm.timed_out() || p->requests_left == 0) return false;
    if (!strm.buffered()) return true;  // idle: back to the waiting room
    // A pipelined request is already here: serve it on this thread.
    {
      std::lock_guard<std::mutex> lock(mu_);
      table_.AwaitingRequest(sock);
    }
    strm.NextRequest(deadline(Clock::now() + Ms(limits_.header_timeout_s)));
  }
  return false;
}

void GuardedHttpServer::ShutdownPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Wake threads blocked reading a client: their reads end at once.
    for (socket_t s : serving_) ::shutdown(s, SHUT_RDWR);
  }
  Wake();
  cv_.notify_all();
  if (waiting_room_.joinable()) waiting_room_.join();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace shardd
