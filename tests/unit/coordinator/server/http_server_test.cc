// The HTTP server for real on a loopback port: idle TCP connections cannot
// starve /healthz (issue 18, item 8), the dashboard and its JSON are served,
// the login form and one-time login links set an HttpOnly cookie, every peer
// (loopback too) needs the token unless trust_loopback, /metrics too unless
// metrics_without_token, and the Host header must name the server (issue 28,
// item 11). The pure rules: dashboard_access_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>

#include "coordinator/server/http_server.h"
#include "tests/unit/coordinator/coordinator_test_util.h"
#include "tests/unit/coordinator/server/http_test_util.h"

namespace shardd::testing {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

class HttpServerTest : public JobManagerTest {
 protected:
  void StartHttp(const std::function<void(HttpServerOptions&)>& tweak = nullptr) {
    HttpServerOptions o;
    o.listen = "127.0.0.1:0";
    o.admin_token = "s3cret";
    o.version = "test";
    if (tweak) tweak(o);
    auto s = HttpServer::Start(o, manager_.get());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    http_ = std::move(*s);
  }
  void TearDown() override {
    if (http_) http_->Stop();
    JobManagerTest::TearDown();
  }
  std::unique_ptr<HttpServer> http_;
};

TEST_F(HttpServerTest, IdleConnectionsDoNotStarveHealthz) {
  StartHttp();
  std::vector<int> idle;
  for (int i = 0; i < 32; ++i) idle.push_back(Connect(http_->port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the server accept them all
  // From another loopback address, the same peer (all of 127/8), at its cap
  // of 16 now: the oldest idle connection makes room.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string reply = RawRequest("127.0.0.2", http_->port(), "GET /healthz", "", 10);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(StatusOf(reply), 200) << "no answer with 32 idle connections open: '" << reply << "'";
  EXPECT_NE(reply.find("\r\n\r\nok\n"), std::string::npos) << reply;
  // The failure mode is a stall of the keep-alive/read timeout (5 s+) or none
  // at all; a generous bound keeps this from being a timing test.
  std::printf("/healthz answered in %.3f s behind 32 idle connections\n", s);
  EXPECT_LT(s, 2.5) << "/healthz took " << s << " s behind 32 idle connections";
  for (int fd : idle) close(fd);
}

TEST_F(HttpServerTest, ServesTheDashboardAndItsJson) {
  const std::string id = StartRunningJob();
  StartHttp();
  httplib::Client c("127.0.0.1", http_->port());
  c.set_bearer_token_auth("s3cret");
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("/app.js"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  auto js = c.Get("/app.js");
  ASSERT_TRUE(js);
  EXPECT_NE(js->body.find("data-points"), std::string::npos);
  ASSERT_TRUE(c.Get("/style.css"));
  EXPECT_EQ(c.Get("/nope.js")->status, 404);

  auto list = c.Get("/api/jobs");
  ASSERT_TRUE(list);
  auto lj = nlohmann::json::parse(list->body);
  ASSERT_EQ(lj["jobs"].size(), 1u);
  EXPECT_EQ(lj["jobs"][0]["id"], id);
  EXPECT_EQ(lj["jobs"][0]["state"], "RUNNING");
  auto job = c.Get(("/api/jobs/" + id).c_str());
  ASSERT_TRUE(job);
  auto jj = nlohmann::json::parse(job->body);
  EXPECT_EQ(jj["workers"].size(), 2u);
  EXPECT_TRUE(jj.contains("plan"));
  auto m = c.Get(("/api/jobs/" + id + "/metrics").c_str());
  ASSERT_TRUE(m);
  EXPECT_EQ(nlohmann::json::parse(m->body)["total_rows"], 0);
  EXPECT_EQ(c.Get("/api/jobs/nope-9")->status, 404);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("shardd_job_state{job_id=\"" + id + "\",state=\"RUNNING\"} 1"), std::string::npos);
}

// Loopback is no credential: a proxy or another user on this host connects
// from 127.0.0.1 too. Everything but /healthz and the login page wants the token.
TEST_F(HttpServerTest, LoopbackPeersNeedTheTokenToo) {
  StartHttp();
  httplib::Client c("127.0.0.1", http_->port());
  auto api = c.Get("/api/jobs");
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 401) << api->body;
  EXPECT_NE(api->body.find("shardctl dashboard"), std::string::npos) << api->body;
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 302);
  EXPECT_EQ(page->get_header_value("Location"), "/login");
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 401);
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  EXPECT_EQ(c.Get("/login")->status, 200);
  // The token as a bearer header or as the cookie opens both.
  EXPECT_EQ(c.Get("/api/jobs", {{"Authorization", "Bearer s3cret"}})->status, 200);
  EXPECT_EQ(c.Get("/metrics", {{"Cookie", "shardd_token=s3cret"}})->status, 200);
  EXPECT_EQ(c.Get("/api/jobs", {{"Authorization", "Bearer s3cre"}})->status, 401);
}

TEST_F(HttpServerTest, TrustLoopbackAndOpenMetricsAreOptIns) {
  StartHttp([](HttpServerOptions& o) { o.metrics_without_token = true; });
  httplib::Client c("127.0.0.1", http_->port());
  EXPECT_EQ(c.Get("/metrics")->status, 200);
  EXPECT_EQ(c.Get("/api/jobs")->status, 401);
  http_->Stop();
  StartHttp([](HttpServerOptions& o) { o.trust_loopback = true; });
  httplib::Client t("127.0.0.1", http_->port());
  EXPECT_EQ(t.Get("/api/jobs")->status, 200);
  EXPECT_EQ(t.Get("/metrics")->status, 200);
}

// DNS rebinding: a page on a name that now resolves to 127.0.0.1 sends its
// own name as Host. Only IP literals, localhost and configured names pass.
TEST_F(HttpServerTest, ForeignHostHeadersAreRefused) {
  StartHttp([](HttpServerOptions& o) { o.hosts = {"shardd.example.org"}; });
  const int port = http_->port();
  const std::string bearer = "Authorization: Bearer s3cret\r\n";
  auto get = [&](const std::string& host, const std::string& path) {
    const int fd = ConnectFrom("127.0.0.1", port);
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n" + bearer + "\r\n";
    send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    std::string reply = ReadUntilClosed(fd, 20);
    close(fd);
    return reply;
  };
  const std::string evil = get("rebind.evil.example:" + std::to_string(port), "/api/jobs");
  EXPECT_EQ(StatusOf(evil), 421) << evil;
  EXPECT_NE(evil.find("rebind.evil.example"), std::string::npos) << evil;
  EXPECT_NE(evil.find("--dashboard-host"), std::string::npos) << evil;
  EXPECT_EQ(StatusOf(get("rebind.evil.example", "/metrics")), 421);
  EXPECT_EQ(StatusOf(get("rebind.evil.example", "/login")), 421);
  EXPECT_EQ(StatusOf(get("rebind.evil.example", "/healthz")), 200);  // leaks nothing; probes use any name
  for (const std::string& host : {"127.0.0.1:" + std::to_string(port), std::string("localhost"), std::string("[::1]:80"),
                                 std::string("SHARDD.example.org:443"), std::string("10.2.3.4")})
    EXPECT_EQ(StatusOf(get(host, "/api/jobs")), 200) << host;
}

TEST_F(HttpServerTest, LoginSetsAnHttpOnlyCookieOnlyForTheRightToken) {
  StartHttp();
  httplib::Client c("127.0.0.1", http_->port());
  auto bad = c.Post("/login", "token=wrong", "application/x-www-form-urlencoded");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 401);
  EXPECT_FALSE(bad->has_header("Set-Cookie"));
  auto good = c.Post("/login", "token=s3cret", "application/x-www-form-urlencoded");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 302);
  const std::string cookie = good->get_header_value("Set-Cookie");
  EXPECT_NE(cookie.find("shardd_token=s3cret"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos) << cookie;
}

// shardctl dashboard: a token holder gets a nonce; the link logs a browser in
// once (cookie, then the page it names), and never again.
TEST_F(HttpServerTest, LoginLinksWorkOnceAndNeedTheToken) {
  StartHttp();
  httplib::Client c("127.0.0.1", http_->port());
  EXPECT_EQ(c.Post("/api/login-link", "", "application/json")->status, 401);
  auto issued = c.Post("/api/login-link", {{"Authorization", "Bearer s3cret"}}, "", "application/json");
  ASSERT_TRUE(issued);
  ASSERT_EQ(issued->status, 200) << issued->body;
  const auto j = nlohmann::json::parse(issued->body);
  const std::string path = j["path"];
  EXPECT_EQ(path.rfind("/login?nonce=", 0), 0u) << path;
  EXPECT_EQ(path.find("s3cret"), std::string::npos) << "the token is in the link";
  EXPECT_EQ(j["expires_in_s"], kLoginLinkTtl.count());
  auto login = c.Get((path + "&next=%2F%23%2Fjob%2Fj-1").c_str());
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 302);
  EXPECT_EQ(login->get_header_value("Location"), "/#/job/j-1");
  const std::string cookie = login->get_header_value("Set-Cookie");
  EXPECT_NE(cookie.find("shardd_token=s3cret"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos) << cookie;
  EXPECT_EQ(c.Get("/api/jobs", {{"Cookie", cookie.substr(0, cookie.find(';'))}})->status, 200);
  auto again = c.Get(path.c_str());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 401);
  EXPECT_FALSE(again->has_header("Set-Cookie"));
  EXPECT_NE(again->body.find("used already or has expired"), std::string::npos);
  // A login never sends the browser to another origin.
  auto direct = http_->IssueLoginPath(std::chrono::seconds(60), "//evil.example/x");
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(direct->find("next="), std::string::npos) << *direct;
  auto off = c.Get((*direct + "&next=%2F%2Fevil.example").c_str());
  ASSERT_TRUE(off);
  EXPECT_EQ(off->get_header_value("Location"), "/");
  EXPECT_EQ(c.Get("/login?nonce=0123456789abcdef0123456789abcdef")->status, 401);
}

}  // namespace
}  // namespace shardd::testing
