// The coordinator's brain, as one facade over the classes of coordinator/jobs/:
//
//   JobTable         every job, its events and watchers, fencing; the one job lock
//   AttemptRunner    every launcher call (launch, observe, adopt, terminate), never under that lock
//   AttemptLifecycle an attempt's state changes (begin, fail/restart, preempt, exits)
//   ControlLoop      Tick, health and timers; the tick and liveness-pulse threads
//   WorkerGateway    the WorkerService calls (join, register, heartbeat, reports)
//   JobSubmission    validation, admission and cancel
//   JobScheduler     the local host's queue and placements
//   JobRecovery      adoption at start
//   JobQueries       the read side
//
// Plain C++ over protobuf messages — no gRPC here (server/ adapts RPCs onto
// these methods), so tests drive it directly with a fake launcher and a fake
// clock.
//
//   QUEUED → LAUNCHING → RUNNING → SUCCEEDED | FAILED | CANCELLED
//                ↑__ RESTARTING ←__|  (while restart.max_restarts allows)
//
// Every worker call names (job, attempt, rank) and carries the attempt's
// token; a call from any other attempt is refused (fencing), so two
// generations of workers never train at once. Every decision is an event with
// a reason, stored in SQLite with the job's new state in one transaction.
//
// Thread-safety: all public methods are thread-safe (one mutex, the job
// table's, guards every job). Watch sinks are called with it held and must
// not call back in. Nothing that can take seconds runs under it, so worker
// calls (heartbeats) are answered while a launch or a checkpoint verification
// is in progress: launchers (which may run sbatch/kubectl/scontrol) are called
// only with the runner's serial lock held and the job lock not held, and
// checkpoint verification and the planner run outside the job lock. Work
// decided under the lock is applied after re-taking it only if the job is
// still in the attempt it was decided for (fencing by attempt number), so a
// cancel that arrived meanwhile wins.
#pragma once

#include <string>
#include <vector>

#include "coordinator/checkpoints/checkpoint_committer.h"
#include "coordinator/jobs/attempt_lifecycle.h"
#include "coordinator/jobs/attempt_runner.h"
#include "coordinator/jobs/control_loop.h"
#include "coordinator/jobs/job.h"
#include "coordinator/jobs/job_options.h"
#include "coordinator/jobs/job_paths.h"
#include "coordinator/jobs/job_queries.h"
#include "coordinator/jobs/job_recovery.h"
#include "coordinator/jobs/job_scheduler.h"
#include "coordinator/jobs/job_submission.h"
#include "coordinator/jobs/job_table.h"
#include "coordinator/jobs/worker_gateway.h"
#include "coordinator/jobs/worker_kv.h"
#include "coordinator/launchers/launcher.h"
#include "coordinator/rendezvous/rendezvous_store.h"
#include "coordinator/sched/host_allocator.h"
#include "coordinator/sched/job_queue.h"
#include "coordinator/state/state_store.h"
#include "coordinator/telemetry/telemetry.h"
#include "shard/spec/job_config.h"
#include "shardd/v1/coordinator.pb.h"
#include "shardd/v1/worker.pb.h"

namespace shardd {

class JobManager {
 public:
  using EventSink = JobTable::EventSink;

  // `launcher` serves jobs whose resources.launcher is its name(); more are
  // added with AddLauncher. Jobs with launcher: external need none.
  JobManager(JobManagerOptions opts, StateStore* store, Launcher* launcher);
  ~JobManager();
  // Before Recover/Start. Replaces any launcher of the same name. A launcher's
  // CheckAvailable must be thread-safe (Submit calls it from RPC threads).
  void AddLauncher(Launcher* launcher) { runner_.AddLauncher(launcher); }

  // Loads every job from the store. Active attempts are adopted: their ranks
  // get one heartbeat deadline to show they are alive, else the attempt fails
  // and restarts from the newest committed checkpoint.
  Status Recover() { return recovery_.Recover(); }
  // Runs Tick() every tick_s on a thread until Stop(), and NoteAlive() on
  // another, so launcher calls that hold up the Ticks never look like a stall.
  void Start() { loop_.Start(); }
  void Stop() { loop_.Stop(); }
  // Takes the job lock to note that the coordinator is alive: after a
  // blackout longer than stall_forgive_s, every live rank's clocks skip it.
  void NoteAlive() { loop_.NoteAlive(); }
  // One pass of the control loop: launcher exits, health, timers, launches.
  // Launcher calls and checkpoint verification happen outside the job lock.
  void Tick() { loop_.Tick(); }

  // ---- JobService ----
  StatusOr<v1::JobStatus> Submit(const v1::JobSpec& spec) { return submission_.Submit(spec); }
  StatusOr<v1::JobStatus> Get(const std::string& job_id) { return queries_.Get(job_id); }
  std::vector<v1::JobStatus> List(bool include_finished) { return queries_.List(include_finished); }
  // Every job's status with its histograms and counters (for /metrics and the
  // dashboard). Jobs that ended more than finished_grace_ms ago are left out
  // (< 0: none are).
  std::vector<JobTelemetry> Telemetry(int64_t finished_grace_ms) { return queries_.Telemetry(finished_grace_ms); }
  StatusOr<v1::JobStatus> Cancel(const std::string& job_id, const std::string& reason) {
    return submission_.Cancel(job_id, reason);
  }
  StatusOr<std::vector<v1::CheckpointInfo>> Checkpoints(const std::string& job_id) {
    return queries_.Checkpoints(job_id);
  }
  // Rank 0's stored per-step metrics in step order: steps after `after_step`,
  // only the last `last` of them when last > 0. The earliest kMaxMetricRows
  // rows that fit `max_bytes` serialized (<= 0: 4 MiB, gRPC's default message
  // limit; the first row always goes); `truncated` says more matched.
  StatusOr<v1::GetMetricsResponse> Metrics(const std::string& job_id, int64_t after_step, int64_t last,
                                           int64_t max_bytes) {
    return queries_.Metrics(job_id, after_step, last, max_bytes);
  }
  static constexpr int kMaxMetricRows = JobQueries::kMaxMetricRows;
  StatusOr<LogChunk> Logs(const std::string& job_id, int rank, int attempt, int64_t offset, int max_bytes) {
    return queries_.Logs(job_id, rank, attempt, offset, max_bytes);
  }
  // Appends past events (seq > after_seq) to *past, then calls sink for each
  // new one until Unwatch. Returns the watch id.
  StatusOr<int64_t> Watch(const std::string& job_id, int64_t after_seq, EventSink sink,
                          std::vector<v1::JobEvent>* past) {
    return queries_.Watch(job_id, after_seq, std::move(sink), past);
  }
  void Unwatch(int64_t watch_id) { queries_.Unwatch(watch_id); }
  // The job's stored events with seq > after_seq, oldest first.
  StatusOr<std::vector<v1::JobEvent>> Events(const std::string& job_id, int64_t after_seq) {
    return queries_.Events(job_id, after_seq);
  }

  // True once the job has ended and none of its processes runs any more.
  bool Drained(const std::string& job_id) { return queries_.Drained(job_id); }

  // ---- WorkerService ----
  // Authenticates and fences a worker call: the job exists, `id.attempt` is
  // its current attempt, the rank is in range and the token is the attempt's.
  Status CheckWorker(const v1::WorkerId& id, const std::string& token) { return gateway_.CheckWorker(id, token); }
  // launcher: external: a worker joins the current attempt with the job's join token.
  StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& req, const std::string& join_token) {
    return gateway_.Join(req, join_token);
  }
  StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& req, const std::string& token) {
    return gateway_.Register(req, token);
  }
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req, const std::string& token) {
    return gateway_.Heartbeat(req, token);
  }
  // Commits a step once every rank has reported it; retention of older steps
  // then runs without the job lock (deleting hundreds of GB can take seconds).
  StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                                          const std::string& token) {
    return gateway_.ReportCheckpoint(req, token);
  }
  Status ReportDone(const v1::ReportDoneRequest& req, const std::string& token) { return gateway_.ReportDone(req, token); }
  Status ReportFailure(const v1::ReportFailureRequest& req, const std::string& token) {
    return gateway_.ReportFailure(req, token);
  }
  // The rendezvous calls, fenced as CheckWorker, in the attempt's space
  // (keys under AttemptKvPrefix) and bounded per attempt
  // (RendezvousLimits; RESOURCE_EXHAUSTED names the cap). Get/Wait answer
  // through done, at once when refused.
  Status KvSet(const v1::WorkerId& id, const std::string& token, const std::string& key, std::string value) {
    return kv_.Set(id, token, key, std::move(value));
  }
  StatusOr<int64_t> KvAdd(const v1::WorkerId& id, const std::string& token, const std::string& key, int64_t delta) {
    return kv_.Add(id, token, key, delta);
  }
  StatusOr<bool> KvCheck(const v1::WorkerId& id, const std::string& token, const std::string& key) {
    return kv_.Check(id, token, key);
  }
  void KvGet(const v1::WorkerId& id, const std::string& token, const std::string& key, int64_t deadline_ms,
             RendezvousStore::GetCallback done) {
    kv_.Get(id, token, key, deadline_ms, std::move(done));
  }
  void KvWait(const v1::WorkerId& id, const std::string& token, const std::vector<std::string>& keys,
              int64_t deadline_ms, RendezvousStore::WaitCallback done) {
    kv_.Wait(id, token, keys, deadline_ms, std::move(done));
  }
  RendezvousStore* rendezvous() { return &rendezvous_; }

  int64_t now_ms() const { return opts_.now_ms(); }
  // Set once, before Start() (the bound port is known only after listening).
  void set_coordinator_address(const std::string& a) { opts_.coordinator_address = a; }

 private:
  // Declared in construction order: each part is built over the ones above it.
  JobManagerOptions opts_;
  RendezvousStore rendezvous_;
  JobTable table_;
  JobScheduler sched_;
  AttemptRunner runner_;
  AttemptLifecycle attempts_;
  ControlLoop loop_;
  WorkerGateway gateway_;
  WorkerKv kv_;
  JobSubmission submission_;
  JobRecovery recovery_;
  JobQueries queries_;
};

}  // namespace shardd
