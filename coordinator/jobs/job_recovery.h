// Recovery at start: every job rebuilt from the state store after a
// coordinator restart. Attempts that may still run are adopted (their ranks
// get one heartbeat deadline to show they are alive, else the attempt fails
// and restarts from the newest committed checkpoint); an attempt that was
// being stopped is watched again and finished; the local placements return.
//
// Thread-safety: Recover runs once, before Start and before any RPC; it holds
// the runner's serial lock and the table's lock throughout (Adopt may ask a
// cluster under them here).
#pragma once

#include <memory>

#include "coordinator/jobs/attempt_runner.h"
#include "coordinator/jobs/job_scheduler.h"
#include "coordinator/jobs/job_table.h"

namespace shardd {

class JobRecovery {
 public:
  JobRecovery(const JobManagerOptions& opts, JobTable* table, AttemptRunner* runner, JobScheduler* sched)
      : opts_(opts), table_(table), runner_(runner), sched_(sched) {}

  Status Recover();

 private:
  // The job as stored, with its config parsed (null: the stored spec does not parse).
  std::unique_ptr<Job> LoadJob(const JobRecord& rec);
  // A job whose spec no longer parses: kept, but failed if active (it can never run again).
  void KeepUnparsable(std::unique_ptr<Job> j, const Status& why);
  // Adoption, re-draining or a prompt restart of one loaded job.
  Status Resume(Job& j, int64_t now);
  // LAUNCHING or RUNNING: the workers keep training through a coordinator
  // restart and reconnect; they get one heartbeat deadline to show up.
  Status Adopt(Job& j, int64_t now);
  // After a restart: the newest committed step on disk that the store does not
  // know (the previous coordinator died between writing COMMITTED and
  // recording it) is recorded now, with its event.
  void ReconcileCommits(Job& j);

  const JobManagerOptions& opts_;
  JobTable* table_;
  AttemptRunner* runner_;
  JobScheduler* sched_;
};

}  // namespace shardd
