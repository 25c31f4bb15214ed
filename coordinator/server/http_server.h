// The coordinator's HTTP side:
//   GET /healthz          "ok" for liveness probes (open to anyone)
//   GET /metrics          Prometheus text (metrics_page.h)
//   GET /                 the web dashboard (assets built into the binary)
//   GET /api/jobs[/<id>[/metrics]]   the JSON it polls (dashboard_api.h)
//   POST /api/login-link  a one-time login path for a token holder (shardctl dashboard)
//   GET|POST /login       the token form, or ?nonce=N from a login link: sets
//                         the admin token as an HttpOnly cookie
// Everything but /healthz checks the Host header and needs the admin token
// from every peer, loopback included (dashboard_access.h has the rules and the
// opt-ins: trust_loopback, metrics_without_token). Without --allow-insecure it
// listens on loopback only (plain HTTP).
//
// Slow or many clients cannot starve /healthz: connections are admitted and
// timed by GuardedHttpServer (http_connections.h: per-peer cap, a deadline for
// a whole request, a reserve of fast-turning threads); idle keep-alive
// connections close after keep_alive_timeout_s.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/jobs/job_manager.h"
#include "coordinator/server/dashboard_access.h"
#include "coordinator/server/connection_limits.h"

namespace shardd {

class GuardedHttpServer;

struct HttpServerOptions {
  std::string listen;              // host:port (port 0 = any)
  bool allow_insecure = false;     // permit a non-loopback listen address
  std::string admin_token;         // what every client must present (dashboard_access.h)
  bool trust_loopback = false;     // loopback peers need no token (single-user machines only)
  bool metrics_without_token = false;  // /metrics open to anyone who reaches the port
  std::vector<std::string> hosts;  // Host header names accepted besides IP literals and localhost
  double finished_grace_s = 300;   // ended jobs leave /metrics this long after their end (< 0: never)
  ConnectionLimits limits;         // threads, per-peer cap, request deadline
  int read_timeout_s = 5;          // each read; limits.header_timeout_s bounds the whole request
  int keep_alive_timeout_s = 2;
  std::string version;             // shardd_build_info{version}
};

// How long a link from POST /api/login-link (shardctl dashboard) stays valid.
inline constexpr std::chrono::seconds kLoginLinkTtl{120};

class HttpServer {
 public:
  static shard::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& opts, JobManager* jobs);
  ~HttpServer();
  int port() const { return port_; }
  // "/login?nonce=N[&next=PATH]": logs a browser in once, within ttl.
  shard::StatusOr<std::string> IssueLoginPath(std::chrono::seconds ttl, const std::string& next = "/");
  // Connections refused at accept (a cap reached, none to evict) since start.
  size_t refused_connections() const;
  // Connections closed in their headers to make room for a newcomer since start.
  size_t evicted_connections() const;
  void Stop();

 private:
  HttpServer() = default;
  void Routes();
  std::unique_ptr<GuardedHttpServer> server_;
  std::shared_ptr<LoginNonces> nonces_ = std::make_shared<LoginNonces>();
  HttpServerOptions opts_;
  JobManager* jobs_ = nullptr;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace shardd
