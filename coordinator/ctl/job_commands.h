// shardctl's coordinator commands: run, submit, status, metrics, list, cancel,
// watch, logs, and checkpoints JOB. They talk JobService over gRPC; `run` embeds a
// local coordinator when none answers at the address.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace CLI {
class App;
}

namespace shardctl {

struct ClientOptions {
  std::string coordinator;  // host:port; default $SHARDD_COORDINATOR or 127.0.0.1:7070
  std::string token;        // default $SHARDD_TOKEN, else <state dir>/admin.token
  std::string state_dir;    // default $SHARDD_STATE_DIR or .shardd
  std::string tls_ca;       // PEM: use TLS; default $SHARDD_TLS_CA
  std::string tls_cert;     // PEM client certificate for mutual TLS; default $SHARDD_TLS_CERT
  std::string tls_key;      // its private key; default $SHARDD_TLS_KEY
};

class JobCommands {
 public:
  // Adds the subcommands (and the global --coordinator/--token/--state-dir/--tls-ca/--tls-cert/--tls-key)
  // to app.
  explicit JobCommands(CLI::App& app);
  ~JobCommands();
  // True when one of these subcommands was given.
  bool Selected() const;
  shard::Status Run();
  // `checkpoints JOB` through the coordinator.
  shard::Status Checkpoints(const std::string& job_id, bool json);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace shardctl
