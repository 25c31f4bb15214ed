// Slow clients cannot starve the HTTP server (issue 28, item 12): real
// sockets on loopback against an in-process HttpServer with short limits.
// Slow-loris clients send a request line and then one header line now and
// then, so no single read ever times out. Each test waits for the event it
// needs, with generous bounds: the failure mode is a wait of the full
// (long) header deadline, far beyond them.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "coordinator/server/http_connections.h"
#include "coordinator/server/http_server.h"
#include "tests/unit/coordinator/coordinator_test_util.h"
#include "tests/unit/coordinator/server/http_test_util.h"

namespace shardd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Sockets that trickle a request's headers: a request line at once, then
// "X-Slow: 1" every 200 ms until the server closes them (or Stop).
class SlowLoris {
 public:
  void Open(const std::string& src, int port, int n) {
    for (int i = 0; i < n; ++i) {
      const int fd = ConnectFrom(src, port);
      ASSERT_GE(fd, 0) << "connect from " << src;
      const std::string line = "GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n";
      ASSERT_EQ(send(fd, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
      std::lock_guard<std::mutex> lock(mu_);
      open_.emplace(fd, Clock::now());
    }
    if (!thread_.joinable()) thread_ = std::thread([this] { Trickle(); });
  }
  // Waits until `n` sockets were closed by the server; false after timeout_s.
  bool WaitClosed(size_t n, double timeout_s) {
    const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    while (Clock::now() < end) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (lifetimes_.size() >= n) return true;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  std::vector<double> lifetimes() {
    std::lock_guard<std::mutex> lock(mu_);
    return lifetimes_;
  }
  size_t still_open() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_.size();
  }
  ~SlowLoris() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (auto& [fd, t] : open_) close(fd);
  }

 private:
  void Trickle() {
    while (!stop_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto it = open_.begin(); it != open_.end();) {
          // Closed by the server: EOF (after any reply) or a reset.
          pollfd p{it->first, POLLIN, 0};
          bool closed = false;
          if (poll(&p, 1, 0) > 0) {
            char buf[4096];
            const ssize_t n = recv(it->first, buf, sizeof(buf), MSG_DONTWAIT);
            closed = n == 0 || (n < 0 && errno != EAGAIN);
          }
          if (!closed) closed = send(it->first, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN;
          if (closed) {
            lifetimes_.push_back(Since(it->second));
            close(it->first);
            it = open_.erase(it);
          } else {
            ++it;
          }
        }
      }
      std::this_thread::sleep_for(200ms);
    }
  }
  std::mutex mu_;
  std::map<int, Clock::time_point> open_;  // fd -> opened at
  std::vector<double> lifetimes_;          // seconds each closed socket lived
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class HttpConnectionsTest : public JobManagerTest {
 protected:
  void StartHttp(const ConnectionLimits& limits) {
    HttpServerOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_token = "s3cret";
    o.limits = limits;
    auto s = HttpServer::Start(o, manager_.get());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    http_ = std::move(*s);
  }
  void TearDown() override {
    loris_.reset();
    if (http_) http_->Stop();
    JobManagerTest::TearDown();
  }
  // /healthz from `src`, and how long it took.
  std::pair<std::string, double> Healthz(const std::string& src) {
    const auto t0 = Clock::now();
    std::string reply = RawRequest(src, http_->port(), "GET /healthz", "", /*timeout_s=*/20);
    return {reply, Since(t0)};
  }
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<SlowLoris> loris_ = std::make_unique<SlowLoris>();
};

// 70 slow sockets from one peer: 16 are served (and held), the other 54 are
// refused at once with a 503, and /healthz from another address is answered
// although the request deadline (60 s) is far off. Without the per-peer cap
// all 64 threads hold a slow socket and /healthz waits the full minute.
TEST_F(HttpConnectionsTest, OnePeerCannotTakeEveryThread) {
  ConnectionLimits l;  // 64 threads, 16 per peer
  l.reserve = 0;       // the cap alone (the reserve has its own test)
  l.header_timeout_s = 60;
  StartHttp(l);
  loris_->Open("127.0.0.1", http_->port(), 70);
  ASSERT_TRUE(loris_->WaitClosed(54, 20)) << "only " << loris_->lifetimes().size() << " of the 54 over the cap closed";
  EXPECT_EQ(http_->refused_connections(), 54u);
  EXPECT_EQ(loris_->still_open(), 16u);
  for (double s : loris_->lifetimes()) EXPECT_LT(s, 15) << "an over-cap socket was not refused at once";
  auto [reply, s] = Healthz("127.0.0.2");
  EXPECT_EQ(StatusOf(reply), 200) << "/healthz from another peer behind 70 slow sockets: '" << reply << "'";
  EXPECT_NE(reply.find("\r\n\r\nok\n"), std::string::npos) << reply;
  std::printf("/healthz answered in %.3f s behind 70 slow sockets from one peer (54 refused)\n", s);
  // The slow peer's own next connection is refused, with a reason.
  const std::string refused = RawRequest("127.0.0.1", http_->port(), "GET /healthz");
  EXPECT_EQ(StatusOf(refused), 503) << refused;
  EXPECT_NE(refused.find("more than 16 connections from 127.0.0.1"), std::string::npos) << refused;
}

// A request must arrive whole within the header deadline, however steadily
// it trickles: every slow socket is closed after about 1 s. Without the
// deadline each read succeeds within the read timeout and they stay open.
TEST_F(HttpConnectionsTest, SlowHeadersAreCutAtTheRequestDeadline) {
  ConnectionLimits l;
  l.header_timeout_s = 1;
  StartHttp(l);
  loris_->Open("127.0.0.1", http_->port(), 10);
  ASSERT_TRUE(loris_->WaitClosed(10, 30)) << loris_->still_open() << " slow sockets still open after 30 s";
  for (double s : loris_->lifetimes()) {
    EXPECT_GE(s, 0.9) << "closed before its deadline";
    EXPECT_LT(s, 15) << "closed long after its 1 s deadline";
  }
  EXPECT_EQ(http_->refused_connections(), 0u);
  auto [reply, s] = Healthz("127.0.0.1");  // the peer's slots are free again
  EXPECT_EQ(StatusOf(reply), 200) << reply;
}

// Several peers, each within its cap, together hold more than the pool: the
// reserve threads give each new connection 1 s, so /healthz from yet another
// address gets a thread within seconds instead of after the 60 s deadline.
TEST_F(HttpConnectionsTest, ReserveThreadsAnswerHealthzWhenManyPeersAreSlow) {
  ConnectionLimits l;
  l.threads = 8;
  l.per_peer = 4;
  l.reserve = 2;
  l.header_timeout_s = 60;
  l.busy_header_timeout_s = 1;
  StartHttp(l);
  for (const char* peer : {"127.0.0.2", "127.0.0.3", "127.0.0.4"}) loris_->Open(peer, http_->port(), 4);
  // The reserve turns over: slow sockets beyond 6 are cut after 1 s.
  ASSERT_TRUE(loris_->WaitClosed(1, 20)) << "no slow socket was cut on a reserve thread";
  auto [reply, s] = Healthz("127.0.0.9");
  EXPECT_EQ(StatusOf(reply), 200) << "/healthz behind 12 slow sockets on 8 threads: '" << reply << "'";
  std::printf("/healthz answered in %.3f s behind 12 slow sockets from 3 peers on 8 threads\n", s);
  EXPECT_EQ(http_->refused_connections(), 0u);
}

TEST(PeerConnectionsTest, CapsEachPeerAndReleases) {
  PeerConnections p(2);
  EXPECT_TRUE(p.Admit("a"));
  EXPECT_TRUE(p.Admit("a"));
  EXPECT_FALSE(p.Admit("a"));
  EXPECT_TRUE(p.Admit("b"));
  EXPECT_EQ(p.count("a"), 2);
  p.Release("a");
  EXPECT_TRUE(p.Admit("a"));
  p.Release("a");
  p.Release("a");
  p.Release("b");
  EXPECT_EQ(p.count("a"), 0);
  EXPECT_EQ(p.count("b"), 0);
}

}  // namespace
}  // namespace shardd::testing
