// Coordinator mode of shardd-worker: register with the coordinator, receive
// the job and this attempt's resume point, heartbeat from a separate thread,
// train, report each checkpoint shard (the coordinator commits), report done
// or failure. Exit codes tell the launcher what happened.
#pragma once

#include <string>

namespace shardd {

// Process exit codes of shardd-worker.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;        // training failed; a new attempt may succeed
inline constexpr int kExitBadInput = 2;      // the job can never run as written
inline constexpr int kExitAttemptOver = 3;   // the coordinator ended this attempt (fenced or aborted)
inline constexpr int kExitLostCoordinator = 4;

struct AgentOptions {
  std::string coordinator;  // host:port
  std::string tls_ca;
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  std::string token;        // SHARDD_WORKER_TOKEN
  std::string hostname = "127.0.0.1";  // address this rank's collectives listen on
  double reconnect_window_s = 60;      // exit after this long without reaching the coordinator
};

// Runs the worker to completion; returns the process exit code.
int RunAgent(const AgentOptions& opts);

}  // namespace shardd
