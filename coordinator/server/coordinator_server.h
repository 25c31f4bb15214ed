// The coordinator's gRPC edge: JobService (users, admin token) and
// WorkerService (workers, per-attempt tokens) on the callback API, adapting
// each call onto the JobManager. Nothing here decides anything.
#pragma once

#include <memory>
#include <string>

#include "coordinator/jobs/job_manager.h"
#include "shard/common/status.h"

namespace grpc {
class Server;
}

namespace shardd {

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";  // port 0: pick a free one (see port())
  std::string tls_cert;                   // PEM files; both or neither
  std::string tls_key;
  std::string tls_client_ca;              // set: clients must present a cert it signed (mutual TLS)
  bool allow_insecure = false;            // permit a non-loopback address without TLS
  int max_message_bytes = 4 << 20;
};

// True for 127.0.0.0/8, ::1, localhost and unix: addresses.
bool IsLoopbackAddress(const std::string& host_port);

class CoordinatorServer {
 public:
  static shard::StatusOr<std::unique_ptr<CoordinatorServer>> Start(const ServerOptions& opts, JobManager* jobs,
                                                                   const std::string& admin_token);
  ~CoordinatorServer();
  int port() const { return port_; }
  // Stops accepting calls and cancels open streams (watchers).
  void Shutdown();
  void Wait();

 private:
  CoordinatorServer() = default;
  struct Services;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace shardd
