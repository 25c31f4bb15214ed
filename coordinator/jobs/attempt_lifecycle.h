// An attempt's state changes: started, launched, ended, failed (and restarted
// while restart.max_restarts allows), preempted, and the launchers' reports of
// rank exits applied.
//
//   QUEUED → LAUNCHING → RUNNING → SUCCEEDED | FAILED | CANCELLED
//                ↑__ RESTARTING ←__|  (while restart.max_restarts allows)
//
// Thread-safety: every method needs the table's lock held. Nothing here calls
// a launcher: stopping an attempt's processes is queued on the AttemptRunner.
#pragma once

#include <string>
#include <vector>

#include "coordinator/jobs/attempt_runner.h"
#include "coordinator/jobs/job_scheduler.h"
#include "coordinator/jobs/job_table.h"
#include "coordinator/rendezvous/rendezvous_store.h"

namespace shardd {

class AttemptLifecycle {
 public:
  AttemptLifecycle(const JobManagerOptions& opts, JobTable* table, AttemptRunner* runner, JobScheduler* sched,
                   RendezvousStore* rendezvous)
      : opts_(opts), table_(table), runner_(runner), sched_(sched), rendezvous_(rendezvous) {}

  // Starts the next attempt resuming from `resume`; fills *req when a launcher
  // must start its workers (false for launcher: external).
  bool Begin(Job& j, const std::string& resume, LaunchRequest* req, bool this_run_only = false);
  // Applies a launch's result, if the job is still in that attempt.
  void FinishLaunch(const std::string& job_id, int attempt, const StatusOr<std::vector<int>>& pids);
  // Stops the current attempt's processes (SIGTERM now, SIGKILL after the grace).
  void End(Job& j);
  // The attempt failed: restart if allowed, else FAILED. retryable=false fails at once.
  void Fail(Job& j, const std::string& reason, bool retryable);
  // Every rank stopped on its launcher's signal after a checkpoint: a new
  // attempt resumes from it, and the restart budget is not charged.
  void Preempt(Job& j, const std::string& reason);
  // Elastic restarts (elastic_resize.h): ends the attempt and starts the next
  // at once on `world` ranks; not charged as a restart. `kind` and `what`
  // are the event's.
  void Resize(Job& j, int world, const std::string& kind, const std::string& what);
  void ApplyExit(Job& j, const RankExit& e);
  // <state_dir>/jobs/<id>/attempt_<n>: the attempt's rank logs.
  std::string AttemptDir(const Job& j, int attempt) const;

 private:
  void ApplyAllRanksExit(Job& j, const RankExit& e);
  // ": <why>" for a rank that exited: the error it reported, else the last
  // error line of its log (a rank that died before it could report); "".
  std::string CauseOfExit(const Job& j, const RankExit& e) const;

  const JobManagerOptions& opts_;
  JobTable* table_;
  AttemptRunner* runner_;
  JobScheduler* sched_;
  RendezvousStore* rendezvous_;
};

}  // namespace shardd
