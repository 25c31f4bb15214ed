// One job as the coordinator holds it in memory: its spec, state, current
// attempt and ranks, and what the scheduler and telemetry know of it. Plain
// data: JobTable owns every Job and guards it with its lock; the other classes
// of coordinator/jobs/ change a Job only with that lock held.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/checkpoint_committer.h"
#include "coordinator/launchers/launcher.h"
#include "coordinator/sched/host_allocator.h"
#include "coordinator/health/stall_diagnosis.h"
#include "coordinator/health/straggler_detector.h"
#include "coordinator/telemetry.h"
#include "shard/spec/job_config.h"
#include "shardd/v1/coordinator.pb.h"
#include "shardd/v1/worker.pb.h"

namespace shardd {

std::string JobStateName(v1::JobState s);
bool IsTerminal(v1::JobState s);

struct JobRank {
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
  double compute_seconds = 0;   // mean compute per step over the last judged window (0: none yet)
  bool straggler = false;       // StragglerDetector's verdict on that window
  std::string error;         // the failure it reported (ReportFailure), named when it exits
  int64_t claimed_ms = 0;    // external: an elastic join handed this rank out (held briefly for its Register)
  int64_t joined_ms = 0;     // external: a worker joined this attempt as this rank (0: none yet)
  // Its flight recorder's summary at its last heartbeat (stall_diagnosis.h),
  // on the coordinator's clock.
  std::vector<CollectiveSeen> collectives;
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
  std::vector<JobRank> ranks;
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
  // Every rank's compute per step (health:), for the attempt stragglers_attempt.
  StragglerDetector stragglers;
  int stragglers_attempt = 0;
  // health.straggler_action: restart decided on the heartbeat path; the
  // control loop restarts the attempt with this reason ("" = none due).
  std::string straggler_restart;
  // The flight recorder's account of the last stall (one per attempt); stored
  // with the job (JobRecord::stall), so status shows it after a restart.
  v1::StallCause stall;
  // A rank reported a failure that may be a symptom (a peer died): held
  // briefly so a rank's exit, the likely cause, is named instead.
  std::string pending_failure;
  int64_t pending_deadline_ms = 0;
  // The first write of this job's record (an event, a checkpoint commit) the
  // state store refused ("" = none): the job fails with it (the control loop,
  // or ReportDone in place of SUCCEEDED), since what it reports is not stored.
  std::string store_failure;
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
  // Elastic restarts (restart.min_world_size; coordinator/jobs/elastic_resize.h).
  int next_world = 0;              // the next attempt's ranks (0 = parallel.world_size)
  int64_t attempt_began_ms = 0;    // when the current attempt began (Begin)
  std::vector<std::string> last_hosts;  // each rank's host in the previous attempt ("" = never registered)
  int elastic_refused_attempt = 0; // the attempt whose "cannot shrink" was announced
  int elastic_unfit = 0;           // the planner refused this world size (and so every smaller one)
  // External workers beyond a shrunk attempt's ranks, by "host/rank": when
  // each last asked to join. Enough of them grow the job back at its next commit.
  std::map<std::string, int64_t> standby;
  // A launcher's count of the ranks it could place now (Launcher::Capacity,
  // asked off the lock by the control loop; elastic_launched.h): -1 unknown.
  int capacity_ranks = -1;
  int64_t capacity_ms = 0;       // when it was asked
  std::string capacity_error;    // why it could not say, when it could not
  // The ended job's memory-tier folder was removed (or there was none):
  // recorded in the state store, so a coordinator restart removes it once only.
  bool memory_tier_removed = false;
  // The memory tier's job folder as stored with the job ("" = computed by
  // MemoryTierDirOf's rule; a job stored before folders carried the job id
  // keeps the name-and-workdir folder it had, set at recovery).
  std::string memory_dir;
  // The per-host memory tier (MemoryTierPerHost): its newest committed step,
  // as committed from the reports (Manifest JSON with every file), and the
  // manifest the current attempt resumes from ("" = a disk step or none).
  // In memory only: after a coordinator restart the next attempt takes disk.
  std::string memory_manifest;
  int64_t memory_step = -1;
  std::string memory_step_dir;  // rank 0's host folder's copy, for events and the store
  // The committed memory steps before memory_manifest, newest first (step,
  // Manifest JSON; at most memory.keep_last): a restart's fallbacks when the
  // newest cannot be assembled on every host (issue 39 item 6).
  std::vector<std::pair<int64_t, std::string>> memory_fallbacks;
  std::string resume_memory_manifest;
  // The newest memory step a rank reported skipped (memory_step_skipped
  // event): each skipped step is said once, whichever ranks skip it.
  int64_t memory_skipped_step = -1;
  std::vector<std::string> resume_memory_fallbacks;  // the current attempt's, newest first
  int resume_events_attempt = 0;  // the attempt whose workers' resume events were emitted
};

inline bool IsActive(const Job& j) { return !IsTerminal(j.state); }
inline bool IsExternal(const Job& j) { return j.config.resources.launcher == shard::Launcher::kExternal; }
// The job's checkpoint directory (checkpoint.dir/<name>, against its workdir).
std::string CheckpointDirOf(const Job& j);
// The memory tier's job folder (checkpoint.memory; shard::MemoryCheckpointJobDir
// against its workdir), "" when the job's file leaves the tier off.
std::string MemoryTierDirOf(const Job& j);
// Whether the tier keeps one folder per host under MemoryTierDirOf (every
// launcher but local: the ranks may span hosts). The coordinator then never
// reads, writes or removes those folders: it commits memory steps from the
// reports (with partner copies across hosts) and the workers keep, assemble
// and remove their host's folder (docs/control-plane.md, "Checkpoint tiers").
bool MemoryTierPerHost(const Job& j);
// Rendezvous keys of an attempt live under this prefix.
std::string AttemptKvPrefix(const v1::WorkerId& id);
// A fresh random worker or join token.
std::string NewJobToken();

}  // namespace shardd
