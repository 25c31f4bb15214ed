// The coordinator's brain: every job's state machine, its attempts and ranks,
// health decisions, checkpoint commits and the event log. Plain C++ over
// protobuf messages — no gRPC here (server/ adapts RPCs onto these methods), so
// tests drive it directly with a fake launcher and a fake clock.
//
//   QUEUED → LAUNCHING → RUNNING → SUCCEEDED | FAILED | CANCELLED
//                ↑__ RESTARTING ←__|  (while restart.max_restarts allows)
//
// Every worker call names (job, attempt, rank) and carries the attempt's
// token; a call from any other attempt is refused (fencing), so two
// generations of workers never train at once. Every decision is an event with
// a reason, stored in SQLite with the job's new state in one transaction.
//
// Thread-safety: all public methods are thread-safe (one mutex, mu_, guards
// every job). Watch sinks are called with mu_ held and must not call back in.
// Nothing that can take seconds runs under mu_, so worker calls (heartbeats)
// are answered while a launch or a checkpoint verification is in progress:
// launchers (which may run sbatch/kubectl/scontrol) are called only with
// tick_mu_ held and mu_ not held, and checkpoint verification and the
// planner run outside mu_. Work decided under mu_ is applied after re-taking
// it only if the job is still in the attempt it was decided for (fencing by
// attempt number), so a cancel that arrived meanwhile wins.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/checkpoint_committer.h"
#include "coordinator/job_paths.h"
#include "coordinator/launchers/launcher.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/sched/host_allocator.h"
#include "coordinator/sched/job_queue.h"
#include "coordinator/state/state_store.h"
#include "coordinator/telemetry.h"
#include "shard/spec/job_config.h"
#include "shardd/v1/coordinator.pb.h"
#include "shardd/v1/worker.pb.h"

namespace shardd {

struct JobManagerOptions {
  std::string state_dir;            // jobs/<id>/attempt_<n>/rank_<r>.log live here
  std::string coordinator_address;  // what workers dial
  std::string worker_bin;           // shardd-worker
  std::string worker_tls_ca;        // PEM workers verify the coordinator with ("" = plaintext)
  std::string worker_tls_cert;      // PEM client certificate and key workers present (mutual TLS; "" = none)
  std::string worker_tls_key;
  // Canonical directories every job path must lie in (coordinator/job_paths.h);
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

class JobManager {
 public:
  using EventSink = std::function<void(const v1::JobEvent&)>;

  // `launcher` serves jobs whose resources.launcher is its name(); more are
  // added with AddLauncher. Jobs with launcher: external need none.
  JobManager(JobManagerOptions opts, StateStore* store, Launcher* launcher);
  ~JobManager();
  // Before Recover/Start. Replaces any launcher of the same name. A launcher's
  // CheckAvailable must be thread-safe (Submit calls it from RPC threads).
  void AddLauncher(Launcher* launcher);

  // Loads every job from the store. Active attempts are adopted: their ranks
  // get one heartbeat deadline to show they are alive, else the attempt fails
  // and restarts from the newest committed checkpoint.
  Status Recover();
  // Runs Tick() every tick_s on a thread until Stop(), and NoteAlive() on
  // another, so launcher calls that hold up the Ticks never look like a stall.
  void Start();
  void Stop();
  // Takes the job lock to note that the coordinator is alive: after a
  // blackout longer than stall_forgive_s, every live rank's clocks skip it.
  void NoteAlive();
  // One pass of the control loop: launcher exits, health, timers, launches.
  // Launcher calls and checkpoint verification happen outside mu_.
  void Tick();

  // ---- JobService ----
  StatusOr<v1::JobStatus> Submit(const v1::JobSpec& spec);
  StatusOr<v1::JobStatus> Get(const std::string& job_id);
  std::vector<v1::JobStatus> List(bool include_finished);
  // Every job's status with its histograms and counters (for /metrics and the
  // dashboard). Jobs that ended more than finished_grace_ms ago are left out
  // (< 0: none are).
  std::vector<JobTelemetry> Telemetry(int64_t finished_grace_ms);
  StatusOr<v1::JobStatus> Cancel(const std::string& job_id, const std::string& reason);
  StatusOr<std::vector<v1::CheckpointInfo>> Checkpoints(const std::string& job_id);
  // Rank 0's stored per-step metrics in step order: steps after `after_step`,
  // only the last `last` of them when last > 0. The earliest kMaxMetricRows
  // rows that fit `max_bytes` serialized (<= 0: 4 MiB, gRPC's default message
  // limit; the first row always goes); `truncated` says more matched.
  StatusOr<v1::GetMetricsResponse> Metrics(const std::string& job_id, int64_t after_step, int64_t last,
                                           int64_t max_bytes);
  static constexpr int kMaxMetricRows = 100000;
  StatusOr<LogChunk> Logs(const std::string& job_id, int rank, int attempt, int64_t offset, int max_bytes);
  // Appends past events (seq > after_seq) to *past, then calls sink for each
  // new one until Unwatch. Returns the watch id.
  StatusOr<int64_t> Watch(const std::string& job_id, int64_t after_seq, EventSink sink,
                          std::vector<v1::JobEvent>* past);
  void Unwatch(int64_t watch_id);
  // The job's stored events with seq > after_seq, oldest first.
  StatusOr<std::vector<v1::JobEvent>> Events(const std::string& job_id, int64_t after_seq);

  // True once the job has ended and none of its processes runs any more.
  bool Drained(const std::string& job_id);

  // ---- WorkerService ----
  // Authenticates and fences a worker call: the job exists, `id.attempt` is
  // its current attempt, the rank is in range and the token is the attempt's.
  Status CheckWorker(const v1::WorkerId& id, const std::string& token);
  // launcher: external: a worker joins the current attempt with the job's join token.
  StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& req, const std::string& join_token);
  StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& req, const std::string& token);
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req, const std::string& token);
  // Commits a step once every rank has reported it; retention of older steps
  // then runs without mu_ (deleting hundreds of GB can take seconds).
  StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(const v1::ReportCheckpointRequest& req, const std::string& token);
  Status ReportDone(const v1::ReportDoneRequest& req, const std::string& token);
  Status ReportFailure(const v1::ReportFailureRequest& req, const std::string& token);
  // Rendezvous keys of an attempt live under KvPrefix(id).
  static std::string KvPrefix(const v1::WorkerId& id);
  RendezvousStore* rendezvous() { return &rendezvous_; }

  int64_t now_ms() const { return opts_.now_ms(); }
  // Set once, before Start() (the bound port is known only after listening).
  void set_coordinator_address(const std::string& a) { opts_.coordinator_address = a; }

 private:
  struct Rank {
    int pid = 0;
    std::string hostname;
    std::string state = "launched";
    bool registered = false;
    bool done = false;
    bool exited = false;
    int64_t launched_ms = 0;
    int64_t last_heartbeat_ms = 0;
    int64_t last_progress_ms = 0;
    int64_t step = 0;
    double tokens_per_s = 0;
    bool preempted = false;    // stopped on its launcher's signal after a checkpoint
    std::string launcher_id;   // SLURM_JOB_ID, pod name, ...
    std::string devices;       // its hardware probe summary
    int64_t rss_bytes = 0;     // at its last heartbeat
    double step_seconds = 0;   // its last step
    std::string error;         // the failure it reported (ReportFailure), named when it exits
  };
  struct Job {
    std::string id;
    std::string name;
    v1::JobSpec spec;
    shard::JobConfig config;
    v1::JobState state = v1::QUEUED;
    int attempt = 0;
    int restarts = 0;
    std::string reason;
    // The attempt's worker token: kept in memory only to hand to the launcher
    // (or a joining external worker); "" after a coordinator restart. Calls
    // are checked against its hash, which is all the database holds.
    std::string token;
    std::string token_hash;
    std::string previous_token_hash;  // the last attempt's: its stragglers hear "stale attempt"
    std::string join_token;      // launcher: external
    Launcher* launcher = nullptr;  // null for launcher: external
    int64_t created_ms = 0;
    int64_t updated_ms = 0;
    int64_t seq = 0;
    v1::Progress progress;
    std::vector<Rank> ranks;
    std::string resume_from;
    int64_t next_launch_ms = 0;   // RESTARTING: when the next attempt starts
    int draining_attempt = 0;     // an ended attempt whose processes may still run
    int64_t kill_at_ms = 0;       // ... SIGKILLed from then on
    std::unique_ptr<CheckpointCommitter> committer;
    std::deque<double> step_seconds;  // recent step times (ETA, hang limit)
    bool adopted = false;         // recovered after a coordinator restart
    int resumed_event_attempt = 0;  // the attempt whose "resumed" event was emitted
    bool nothing_trained = false;   // rank 0 reported the attempt began at or past train.steps
  int refused_report_attempt = 0; // the attempt whose refused metrics row was announced (worker_reports.h)
    // A rank reported a failure that may be a symptom (a peer died): held
    // briefly so a rank's exit, the likely cause, is named instead.
    std::string pending_failure;
    int64_t pending_deadline_ms = 0;
    std::string queue_reason;     // the launcher's last PendingReason, announced as an event
    // Observability (telemetry.h), in memory only.
    Histogram step_hist{StepTimeBuckets()};
    Histogram commit_hist{CommitBuckets()};
    int64_t checkpoints_committed = 0;
    std::map<int64_t, int64_t> first_report_ms;  // checkpoint step -> its first rank report
    // Model FLOPs per trained position over the cluster's peak FLOP/s (the
    // admission plan's figures): MFU = positions/s × this. 0 = unknown.
    double mfu_per_position_s = 0;
    // The local scheduler (null demand: not scheduled here — another
    // launcher, or no capacity configured). `placed`: the allocator holds
    // the job's devices, from its first launch through restarts and backoff
    // until its last attempt's processes are gone.
    std::optional<sched::Demand> demand;
    bool placed = false;
    int queue_position = 0;  // 1 = next to start
    std::string sched_reason;  // why it waits, as last announced
  };

  // Launcher work decided under mu_ and carried out without it.
  struct TerminateCall {
    Launcher* launcher = nullptr;
    std::string job_id;
    int attempt = 0;
    bool force = false;
  };
  // What the launchers said in one Tick, asked outside mu_.
  struct LauncherView {
    std::vector<RankExit> exits;                          // signalled ones first
    std::map<std::pair<std::string, int>, int> running;   // (job, attempt) -> Running()
    std::map<std::pair<std::string, int>, std::string> pending;  // Pending() attempts -> PendingReason()
  };
  // A launch decided in Tick: the job's next attempt after `prev_attempt`.
  struct LaunchPlan {
    std::string job_id;
    int prev_attempt = 0;
    bool find_latest = false;  // resume from the newest good committed step (verified: slow)
    std::string checkpoint_dir;
    std::string fallback_resume;  // the job file's checkpoint.resume
    // Only this run's steps (or unknown ones) are resumed by a restart: another
    // run that shares the directory never is (shard/spec/run_fingerprint.h).
    std::string run_fingerprint;
    // With --allowed-root: the job's paths, checked again at launch (a
    // symlink made after submission must not lead outside the roots).
    std::string src, workdir;
    std::vector<JobPath> confine;
  };

  bool Active(const Job& j) const;
  v1::JobStatus StatusOf(const Job& j) const;
  StatusOr<Job*> FindLocked(const std::string& job_id);
  // A committed step whose older steps retention may now delete (off mu_).
  struct RetentionTask {
    bool due = false;
    std::string step_dir;
    std::string run_fingerprint;
    int keep_last = 0;
  };
  StatusOr<v1::ReportCheckpointResponse> ReportCheckpointLocked(const v1::ReportCheckpointRequest& req,
                                                                const std::string& token, RetentionTask* retain);
  Status ReportFailureLocked(const v1::ReportFailureRequest& req, const std::string& token);
  // CheckWorker's rules; returns the job on success.
  StatusOr<Job*> CheckWorkerLocked(const v1::WorkerId& id, const std::string& token);
  // Records an event and the job's (possibly new) state in one transaction.
  void EmitLocked(Job& j, const std::string& kind, const std::string& message);
  // After a restart: the newest committed step on disk that the store does not
  // know (the previous coordinator died between writing COMMITTED and
  // recording it) is recorded now, with its event.
  void ReconcileCommitsLocked(Job& j);
  // Stores rank 0's per-step metrics (from a heartbeat or a checkpoint report)
  // and updates the job's live progress for watchers.
  void RecordMetricsLocked(Job& j, const google::protobuf::RepeatedPtrField<v1::StepMetric>& metrics, int64_t now);
  void SetStateLocked(Job& j, v1::JobState state, const std::string& kind, const std::string& reason);

  // ---- submission (job_manager_submit.cc) ----
  // Everything about a spec that needs no job table: parsing, paths, the
  // launcher's availability, the planner. Called without mu_.
  // *mfu_per_position_s: see Job (0 when the plan does not know the peak).
  // *host_bytes: the plan's host memory for the whole job on this host (0 = unknown).
  Status ValidateSpec(const v1::JobSpec& spec, shard::JobConfig* config, std::string* plan_summary,
                      double* mfu_per_position_s, int64_t* host_bytes);
  // No active job shares the checkpoint directory.
  Status CheckNameFreeLocked(const v1::JobSpec& spec, const shard::JobConfig& config);

  // ---- the local host's queue (job_manager_schedule.cc) ----
  // Releases what ended jobs held, starts placements for waiting jobs in
  // queue order and announces why the others wait.
  void ScheduleLocked(int64_t now);
  // The job may go on to launch: not scheduled here, or holding its placement.
  bool MayLaunchLocked(const Job& j) const { return !j.demand || j.placed; }
  void StoreResourcesLocked(const Job& j);
  // After Recover loaded the jobs: the stored demand and placement back into
  // the allocator (adopted and restarting attempts keep their devices).
  Status RestorePlacementsLocked();
  // The environment a launch gets from the job's placement.
  void AddPlacementEnvLocked(const Job& j, LaunchRequest* req) const;

  // ---- lifecycle (job_manager_lifecycle.cc) ----
  // Asks the launchers about exits and the attempts named under mu_ (no mu_).
  LauncherView ObserveLaunchers();
  // Applies what the launchers said, checks health and timers; returns the
  // launches to make.
  std::vector<LaunchPlan> DecideLocked(const LauncherView& view);
  void CheckRunningLocked(Job& j, const LauncherView& view, int64_t now);
  // Called under mu_ by each health check, heartbeat and NoteAlive: after a
  // blackout longer than stall_forgive_s, moves every live rank's clocks
  // forward by it.
  void NoteAliveLocked(int64_t now);
  LaunchPlan PlanLaunchLocked(Job& j) const;
  // Resolves the resume point, starts the attempt and launches it (takes mu_ itself).
  void RunLaunch(const LaunchPlan& plan);
  // Starts the next attempt resuming from `resume`; fills *req when a launcher
  // must start its workers (false for launcher: external).
  bool BeginAttemptLocked(Job& j, const std::string& resume, LaunchRequest* req);
  void FinishLaunchLocked(const std::string& job_id, int attempt, const StatusOr<std::vector<int>>& pids);
  // The attempt failed: restart if allowed, else FAILED. retryable=false fails at once.
  void FailAttemptLocked(Job& j, const std::string& reason, bool retryable);
  // Every rank stopped on its launcher's signal after a checkpoint: a new
  // attempt resumes from it, and the restart budget is not charged.
  void PreemptAttemptLocked(Job& j, const std::string& reason);
  void ApplyExitLocked(Job& j, const RankExit& e);
  // ": <why>" for a rank that exited: the error it reported, else the last
  // error line of its log (a rank that died before it could report); "".
  std::string CauseOfExitLocked(const Job& j, const RankExit& e) const;
  static bool External(const Job& j) { return j.config.resources.launcher == shard::Launcher::kExternal; }
  // Stops the current attempt's processes (SIGTERM now, SIGKILL after the grace).
  void EndAttemptLocked(Job& j);
  // Queues a launcher Terminate for RunTerminates.
  void QueueTerminateLocked(const Job& j, int attempt, bool force);
  // Makes the queued Terminate calls. Needs tick_mu_ held, mu_ not held.
  void RunTerminates();
  // From an RPC thread: runs the queued Terminates now unless a Tick is busy
  // (it runs them when it is done), so an RPC never waits for a launch.
  void TryRunTerminates();
  JobRecord RecordOf(const Job& j) const;
  std::string CheckpointJobDir(const Job& j) const;
  std::string AttemptDir(const Job& j, int attempt) const;
  std::string NewToken() const;

  JobManagerOptions opts_;
  StateStore* store_;
  std::map<std::string, Launcher*> launchers_;  // by name(); set before Start
  RendezvousStore rendezvous_;

  // Serializes Tick and every launcher call (launchers are not thread-safe).
  // Taken before mu_, never while holding it.
  std::mutex tick_mu_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;  // guarded by mu_
  std::vector<TerminateCall> terminates_;             // guarded by mu_
  int64_t next_job_number_ = 1;                       // guarded by mu_
  int64_t last_alive_ms_ = 0;                         // guarded by mu_; the last NoteAliveLocked
  std::unique_ptr<sched::HostAllocator> alloc_;       // guarded by mu_; null: no local scheduling
  struct Watcher {
    std::string job_id;
    EventSink sink;
  };
  std::map<int64_t, Watcher> watchers_;  // guarded by mu_
  int64_t next_watch_id_ = 1;            // guarded by mu_

  std::thread thread_;
  std::thread pulse_thread_;  // NoteAlive every stall_forgive_s / 4 (at most 1 s)
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
};

std::string JobStateName(v1::JobState s);
bool IsTerminal(v1::JobState s);

}  // namespace shardd
