#include "coordinator/server/http_connections.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "shard/common/logging.h"

namespace shardd {

using Clock = std::chrono::steady_clock;

bool PeerConnections::Admit(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  int& n = count_[peer];
  if (n >= per_peer_) return false;
  ++n;
  return true;
}

void PeerConnections::Release(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = count_.find(peer);
  if (it != count_.end() && --it->second <= 0) count_.erase(it);
}

int PeerConnections::count(const std::string& peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = count_.find(peer);
  return it == count_.end() ? 0 : it->second;
}

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
// whole request, besides the per-read timeout (httplib's SocketStream has
// only the latter). Buffered, since httplib reads request lines bytewise.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int sock, Clock::time_point deadline, int read_timeout_ms, int write_timeout_ms)
      : sock_(sock), deadline_(deadline), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {}

  bool is_readable() const override {
    if (pos_ < buf_.size()) return true;
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
  const int sock_;
  const Clock::time_point deadline_;
  const int read_timeout_ms_;
  const int write_timeout_ms_;
  std::string buf_;
  size_t pos_ = 0;
  mutable bool timed_out_ = false;
};

void CloseSocket(int sock) {
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

std::chrono::milliseconds Ms(double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }

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
    : limits_(limits), peers_(std::max(1, limits.per_peer)) {
  new_task_queue = [this] { return new InlineTaskQueue(this); };
  for (int i = 0; i < std::max(1, limits_.threads); ++i) threads_.emplace_back([this] { Worker(); });
}

GuardedHttpServer::~GuardedHttpServer() { ShutdownPool(); }

size_t GuardedHttpServer::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

bool GuardedHttpServer::RaiseListenBacklog(int backlog) {
  const socket_t sock = svr_sock_;
  return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  const std::string peer = PeerOf(sock);
  if (!peers_.Admit(peer)) {
    Refuse(sock, "more than " + std::to_string(limits_.per_peer) + " connections from " + peer);
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && static_cast<int>(queue_.size()) < std::max(1, limits_.max_queued)) {
      queue_.emplace_back(sock, peer);
      cv_.notify_one();
      return true;
    }
  }
  peers_.Release(peer);
  Refuse(sock, "the server's connection queue is full");
  return false;
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

void GuardedHttpServer::Worker() {
  while (true) {
    std::pair<socket_t, std::string> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      if (stopping_) {
        lock.unlock();
        CloseSocket(job.first);
        peers_.Release(job.second);
        continue;
      }
      serving_.insert(job.first);
      ++busy_;
    }
    Serve(job.first);
    {
      std::lock_guard<std::mutex> lock(mu_);
      serving_.erase(job.first);
      --busy_;
    }
    CloseSocket(job.first);
    peers_.Release(job.second);
  }
}

void GuardedHttpServer::Serve(socket_t sock) {
  const int read_ms = static_cast<int>(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000);
  const int write_ms = static_cast<int>(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000);
  for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    // Wait for the request's first byte up to the keep-alive timeout, in
    // slices, so a stopping server is noticed.
    const auto idle_end = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    bool readable = false;
    while (!readable && svr_sock_ != INVALID_SOCKET && Clock::now() < idle_end)
      readable = PollFor(sock, POLLIN, MsUntil(idle_end, 100));
    if (!readable) return;
    bool busy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy = limits_.threads - busy_ < limits_.reserve;
    }
    const auto deadline = Clock::now() + Ms(busy ? limits_.busy_header_timeout_s : limits_.header_timeout_s);
    DeadlineStream strm(sock, deadline, read_ms, write_ms);
    bool connection_closed = false;
    if (!process_request(strm, /*close_connection=*/left == 1, connection_closed, nullptr) || connection_closed ||
        strm.timed_out())
      return;
  }
}

void GuardedHttpServer::ShutdownPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Wake threads blocked reading a client: their reads end at once.
    for (socket_t s : serving_) ::shutdown(s, SHUT_RDWR);
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace shardd
