// The attempt runner (attempt_runner.h): launcher calls, outside the job lock.
#include "coordinator/jobs/attempt_runner.h"

#include <algorithm>
#include <tuple>

#include "coordinator/jobs/elastic_rules.h"
#include "shard/common/logging.h"

namespace shardd {

void AttemptRunner::AddLauncher(Launcher* launcher) {
  auto lock = table_->Lock();
  launchers_[launcher->name()] = launcher;
}

Launcher* AttemptRunner::Find(const std::string& name) const {
  auto it = launchers_.find(name);
  return it == launchers_.end() ? nullptr : it->second;
}

void AttemptRunner::QueueTerminate(const Job& j, int attempt, bool force) {
  if (j.launcher) terminates_.push_back({j.launcher, j.id, attempt, force});
}

void AttemptRunner::RunTerminates() {
  std::vector<TerminateCall> calls;
  {
    auto lock = table_->Lock();
    calls.swap(terminates_);
  }
  for (const TerminateCall& t : calls) t.launcher->Terminate(t.job_id, t.attempt, t.force);
}

void AttemptRunner::TryRunTerminates() {
  std::unique_lock<std::mutex> tick(tick_mu_, std::try_to_lock);
  if (tick.owns_lock()) RunTerminates();
}

LauncherView AttemptRunner::Observe(int64_t now) {
  // Which attempts to ask about, named under the job lock.
  std::vector<std::tuple<Launcher*, std::string, int>> running_q, pending_q;
  std::vector<std::pair<Launcher*, LaunchRequest>> capacity_q;
  {
    auto lock = table_->Lock();
    for (const auto& [id, jp] : table_->jobs()) {
      const Job& j = *jp;
      if (!j.launcher) continue;
      if (j.draining_attempt > 0) running_q.emplace_back(j.launcher, j.id, j.draining_attempt);
      // An exit seen in this Tick may end the current attempt: ask about it too.
      if (IsActive(j) && j.attempt > 0 && j.attempt != j.draining_attempt)
        running_q.emplace_back(j.launcher, j.id, j.attempt);
      if (j.state == v1::LAUNCHING) pending_q.emplace_back(j.launcher, j.id, j.attempt);
      if (elastic::WantsCapacity(j, now))
        capacity_q.emplace_back(j.launcher, elastic::CapacityRequest(j, table_->allocator()));
    }
  }
  LauncherView view;
  for (const auto& [name, launcher] : launchers_) {
    std::vector<RankExit> exits = launcher->Poll();
    // Exits seen together (a busy coordinator, or survivors that left at once)
    // come in rank order, not in the order the ranks died. A rank killed by a
    // signal is the likely cause, and its peers' "failed" exits the effect:
    // apply those first, so the restart names the cause.
    std::stable_partition(exits.begin(), exits.end(), [](const RankExit& e) { return e.signal != 0; });
    view.exits.insert(view.exits.end(), exits.begin(), exits.end());
  }
  for (const auto& [launcher, job_id, attempt] : pending_q)
    if (launcher->Pending(job_id, attempt)) view.pending[{job_id, attempt}] = launcher->PendingReason(job_id, attempt);
  for (const auto& [launcher, job_id, attempt] : running_q)
    view.running[{job_id, attempt}] = launcher->Running(job_id, attempt);
  for (const auto& [launcher, req] : capacity_q)
    view.capacity.emplace(std::make_pair(req.job_id, req.attempt), launcher->Capacity(req));
  return view;
}

StatusOr<std::vector<int>> AttemptRunner::Launch(Launcher* launcher, const LaunchRequest& req, int attempt) {
  LOG_DEBUG("job {} attempt {}: launching {} rank(s) with the {} launcher ({} in {}, logs in {}, dialing {})",
            req.job_id, attempt, req.world, launcher->name(), req.worker_bin, req.workdir, req.log_dir,
            req.coordinator);
  StatusOr<std::vector<int>> pids = launcher->Launch(req);
  if (pids.ok()) LOG_DEBUG("job {} attempt {}: launched {} process(es)", req.job_id, attempt, pids->size());
  else LOG_DEBUG("job {} attempt {}: launch failed: {}", req.job_id, attempt, pids.status().ToString());
  return pids;
}

}  // namespace shardd
