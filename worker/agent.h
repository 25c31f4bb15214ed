// Coordinator mode of shardd-worker: register with the coordinator, receive
// the job and this attempt's resume point, heartbeat from a separate thread,
// train, report each checkpoint shard (the coordinator commits), report done
// or failure. Exit codes tell the launcher what happened.
#pragma once

#include <string>

#include "proto/rpc/tls_files.h"
#include "shard/common/status.h"

namespace shardd {

// Process exit codes of shardd-worker.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;        // training failed; a new attempt may succeed
inline constexpr int kExitBadInput = 2;      // the job can never run as written
inline constexpr int kExitAttemptOver = 3;   // the coordinator ended this attempt (fenced or aborted)
inline constexpr int kExitLostCoordinator = 4;
inline constexpr int kExitPreempted = 5;     // stopped on SIGUSR1 after a checkpoint; a new attempt resumes

// A failure no new attempt can fix: the job's inputs are wrong for this
// model, data or host (INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED,
// OUT_OF_RANGE). The worker exits with kExitBadInput and reports it as not
// retryable, so the coordinator fails the job at once instead of spending
// every restart on it. Producers of such errors use those codes; anything
// else (a lost peer, memory, a device, FAILED_PRECONDITION from a store or
// the coordinator) may pass on a retry.
bool CanNeverSucceed(const shard::Status& st);

struct AgentOptions {
  std::string coordinator;  // host:port
  TlsClientFiles tls;       // --tls-ca/--tls-cert/--tls-key, else SHARDD_TLS_CA/_CERT/_KEY
  std::string job_id;
  int attempt = 0;          // 0: join the current attempt (launcher: external) with a join token
  int rank = 0;
  int world_hint = 0;       // ranks the worker's launcher started (SLURM_NTASKS); 0 = unknown
  std::string token;        // SHARDD_WORKER_TOKEN: the attempt's token, or the job's join token
  std::string launcher_id;  // SLURM_JOB_ID, the pod name, ... (shown by shardctl status)
  bool probe_devices = false;  // report this host's GPUs (one worker per host does)
  std::string hostname = "127.0.0.1";  // address this rank's collectives listen on
  double reconnect_window_s = 60;      // exit after this long without reaching the coordinator
  double join_wait_s = 600;            // external: keep asking this long while the job restarts
};

// Runs the worker to completion; returns the process exit code.
int RunAgent(const AgentOptions& opts);

}  // namespace shardd
