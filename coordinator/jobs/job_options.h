// The JobManager's options and the log chunk it serves, shared by the classes
// of coordinator/jobs/ (each takes the facade's options by reference).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/sched/host_allocator.h"

namespace shardd {

struct JobManagerOptions {
  std::string state_dir;            // jobs/<id>/attempt_<n>/rank_<r>.log live here
  std::string coordinator_address;  // what workers dial
  std::string worker_bin;           // shardd-worker
  std::string worker_tls_ca;        // PEM workers verify the coordinator with ("" = plaintext)
  std::string worker_tls_cert;      // PEM client certificate and key workers present (mutual TLS; "" = none)
  std::string worker_tls_key;
  // Canonical directories every job path must lie in (coordinator/jobs/job_paths.h);
  // empty = no confinement.
  std::vector<std::string> allowed_roots;
  double kill_grace_s = 5;          // SIGTERM → SIGKILL
  double heartbeat_interval_s = 1;
  double register_timeout_s = 120;
  size_t max_spec_bytes = 1 << 20;
  double tick_s = 0.1;
  std::function<int64_t()> now_ms;  // the clock; default: system time
  // shardctl's offline view of a state dir whose coordinator is gone: Recover
  // loads the jobs as stored (no adoption, no events), and submissions,
  // cancels and worker calls are refused. Start() must not be called.
  bool read_only = false;
  // The local host's capacity (coordinator/sched): local jobs then queue for
  // specific GPUs, CPU slots and host memory. nullopt: every local job
  // launches at once, as before scheduling existed (unit tests, read-only views).
  std::optional<sched::HostCapacity> local_capacity;
  int64_t starvation_ms = 10 * 60 * 1000;  // a blocked queue head waits this long before it reserves
  // When the job lock was not taken for more than this long — by the
  // liveness pulse (Start), a health check or a heartbeat — the coordinator
  // itself was stalled (a suspended VM, a disk that held the lock): the
  // ranks' heartbeat, progress and registration clocks skip that blackout,
  // so a stall of the coordinator is never taken for a silent rank. Launcher
  // calls run outside the lock, so a slow one forgives nothing. 0 = off
  // (unit tests whose fake clock jumps between Ticks).
  double stall_forgive_s = 5;
};

struct LogChunk {
  std::string data;
  int64_t next_offset = 0;
  int attempt = 0;
  bool finished = false;
};

}  // namespace shardd
