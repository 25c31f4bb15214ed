// The coordinator's HTTP side:
//   GET /healthz          "ok" for liveness probes
//   GET /metrics          Prometheus text (metrics_page.h)
//   GET /                 the web dashboard (assets built into the binary)
//   GET /api/jobs[/<id>[/metrics]]   the JSON it polls (dashboard_api.h)
//   GET|POST /login       a form that sets the admin token as an HttpOnly cookie
// /healthz and /metrics are unauthenticated (probes and scrapers); the
// dashboard and /api answer loopback clients freely and others only with the
// admin token as "Authorization: Bearer" or the login cookie, never in a URL.
// Without --allow-insecure it listens on loopback only (plain HTTP).
//
// Idle or slow clients cannot starve /healthz: reads time out after
// read_timeout_s, idle keep-alive connections close after keep_alive_timeout_s,
// and the worker pool is larger than cpp-httplib's default of ~8 threads.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "coordinator/job_manager.h"

namespace httplib {
class Server;
}

namespace shardd {

struct HttpServerOptions {
  std::string listen;              // host:port (port 0 = any)
  bool allow_insecure = false;     // permit a non-loopback listen address
  std::string admin_token;         // what non-loopback dashboard clients must present
  double finished_grace_s = 300;   // ended jobs leave /metrics this long after their end (< 0: never)
  int threads = 64;                // connections served at once
  int read_timeout_s = 5;
  int keep_alive_timeout_s = 2;
  std::string version;             // shardd_build_info{version}
};

// The dashboard's rule: a loopback peer, or the admin token as
// "Authorization: Bearer <token>" or the shardd_token cookie (/login sets it).
bool HttpAuthorized(const std::string& remote_addr, const std::string& authorization, const std::string& cookies,
                    const std::string& token);

class HttpServer {
 public:
  static shard::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& opts, JobManager* jobs);
  ~HttpServer();
  int port() const { return port_; }
  void Stop();

 private:
  HttpServer() = default;
  void Routes();
  std::unique_ptr<httplib::Server> server_;
  HttpServerOptions opts_;
  JobManager* jobs_ = nullptr;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace shardd
