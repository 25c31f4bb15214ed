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

#include "coordinator/checkpoints/checkpoint_ledger.h"
#include "coordinator/health/stall_diagnosis.h"
#include "coordinator/jobs/elastic_state.h"
#include "coordinator/jobs/job_health.h"
#include "coordinator/launchers/launcher.h"
#include "coordinator/sched/job_placement.h"
#include "coordinator/telemetry/telemetry.h"
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
  // The owners of what is not the job's own (issue 40 item 4): every
  // checkpoint fact (commits, resume plan, memory tier), the elastic
  // restarts' state, the health verdicts, the local scheduler's placement.
  CheckpointLedger ckpt;
  ElasticState elastic;
  JobHealth health;
  sched::JobPlacement placement;
  int64_t attempt_began_ms = 0;  // when the current attempt began (AttemptLifecycle::Begin)
  int64_t next_launch_ms = 0;   // RESTARTING: when the next attempt starts
  int draining_attempt = 0;     // an ended attempt whose processes may still run
  int64_t kill_at_ms = 0;       // ... SIGKILLed from then on
  std::deque<double> step_seconds;  // recent step times (ETA, hang limit)
  bool adopted = false;         // recovered after a coordinator restart
  bool nothing_trained = false;   // rank 0 reported the attempt began at or past train.steps
  int refused_report_attempt = 0; // the attempt whose refused metrics row was announced (worker_reports.h)
  // The first write of this job's record (an event, a checkpoint commit) the
  // state store refused ("" = none): the job fails with it (the control loop,
  // or ReportDone in place of SUCCEEDED), since what it reports is not stored.
  std::string store_failure;
  std::string queue_reason;     // the launcher's last PendingReason, announced as an event
  // Observability (telemetry.h), in memory only.
  Histogram step_hist{StepTimeBuckets()};
  // Model FLOPs per trained position over the cluster's peak FLOP/s (the
  // admission plan's figures): MFU = positions/s × this. 0 = unknown.
  double mfu_per_position_s = 0;
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
