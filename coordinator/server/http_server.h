// The coordinator's HTTP side: GET /healthz ("ok") for liveness probes and
// GET /metrics in the Prometheus text format (jobs by state, and per job its
// step, loss, tokens/s, attempt, restarts, last committed step and each
// worker's heartbeat age). Read-only and unauthenticated, so it listens on a
// loopback address unless --allow-insecure.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "coordinator/job_manager.h"

namespace httplib {
class Server;
}

namespace shardd {

// The /metrics page for these jobs (a pure function, tested alone).
std::string RenderMetrics(const std::vector<v1::JobStatus>& jobs);

class HttpServer {
 public:
  static shard::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen, bool allow_insecure,
                                                            JobManager* jobs);
  ~HttpServer();
  int port() const { return port_; }
  void Stop();

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace shardd
