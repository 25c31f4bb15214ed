// Submission: a spec is validated (outside the job lock: it may plan, probe
// and ask a cluster CLI), admitted as a QUEUED job, or cancelled. The control
// loop takes it from there.
//
// Thread-safety: every public method is thread-safe (takes the table's lock
// where it needs it).
#pragma once

#include <string>

#include "coordinator/jobs/attempt_lifecycle.h"
#include "coordinator/jobs/attempt_runner.h"
#include "coordinator/jobs/job_scheduler.h"
#include "coordinator/jobs/job_table.h"

namespace shardd {

class JobSubmission {
 public:
  JobSubmission(const JobManagerOptions& opts, JobTable* table, AttemptRunner* runner, JobScheduler* sched,
                AttemptLifecycle* attempts)
      : opts_(opts), table_(table), runner_(runner), sched_(sched), attempts_(attempts) {}

  StatusOr<v1::JobStatus> Submit(const v1::JobSpec& spec);
  StatusOr<v1::JobStatus> Cancel(const std::string& job_id, const std::string& reason);

 private:
  // Everything about a spec that needs no job table: parsing, paths, the
  // launcher's availability, the planner. Called without the lock.
  // *mfu_per_position_s: see Job (0 when the plan does not know the peak).
  // *host_bytes: the plan's host memory for the whole job on this host (0 = unknown).
  Status ValidateSpec(const v1::JobSpec& spec, shard::JobConfig* config, std::string* plan_summary,
                      double* mfu_per_position_s, int64_t* host_bytes);
  // No active job shares the checkpoint directory. With the lock held.
  Status CheckNameFree(const v1::JobSpec& spec, const shard::JobConfig& config);

  const JobManagerOptions& opts_;
  JobTable* table_;
  AttemptRunner* runner_;
  JobScheduler* sched_;
  AttemptLifecycle* attempts_;
};

}  // namespace shardd
