// The control loop (control_loop.h): Tick's phases and the two threads.
#include "coordinator/jobs/control_loop.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "coordinator/health/health_monitor.h"
#include "coordinator/host/probed_cluster.h"
#include "coordinator/jobs/elastic_launched.h"
#include "coordinator/jobs/elastic_resize.h"
#include "coordinator/jobs/job_manager_internal.h"
#include "coordinator/jobs/stall_explainer.h"
#include "shard/ckpt/catalog.h"
#include "shard/ckpt/checkpoint_tier.h"
#include "shard/common/logging.h"
#include "shard/plan/elastic_fit.h"
#include "shard/spec/run_fingerprint.h"

namespace shardd {

void ControlLoop::Tick() {
  std::lock_guard<std::mutex> serial(runner_->serial());
  runner_->RunTerminates();  // queued by RPCs (a cancel) while the last Tick was busy
  const LauncherView view = runner_->Observe(opts_.now_ms());
  std::vector<LaunchPlan> plans;
  {
    auto lock = table_->Lock();
    plans = Decide(view);
  }
  runner_->RunTerminates();
  RemoveEndedMemoryTiers();
  for (const LaunchPlan& plan : plans) {
    RunLaunch(plan);
    runner_->RunTerminates();  // a cancel that arrived during the launch reaches its workers now
  }
}

std::vector<LaunchPlan> ControlLoop::Decide(const LauncherView& view) {
  const int64_t now = opts_.now_ms();
  table_->NoteAlive(now);
  rendezvous_->ExpireWaiters(now);
  for (const RankExit& e : view.exits) {
    auto it = table_->jobs().find(e.job_id);
    if (it == table_->jobs().end()) continue;
    Job& j = *it->second;
    if (e.attempt != j.attempt || !IsActive(j) || j.state == v1::RESTARTING) continue;  // a drained attempt
    attempts_->ApplyExit(j, e);
  }
  for (const auto& [key, capacity] : view.capacity) {
    auto it = table_->jobs().find(key.first);
    if (it != table_->jobs().end() && it->second->attempt == key.second)
      elastic::NoteCapacity(*it->second, capacity, now);
  }
  sched_->Schedule(now);
  std::vector<LaunchPlan> plans;
  for (auto& [id, jp] : table_->jobs()) {
    Job& j = *jp;
    if (j.draining_attempt > 0) {
      auto running = view.running.find({j.id, j.draining_attempt});
      if (!j.launcher || (running != view.running.end() && running->second == 0)) {
        j.draining_attempt = 0;
      } else if (now >= j.kill_at_ms) {
        runner_->QueueTerminate(j, j.draining_attempt, /*force=*/true);
      }
    }
    // The job is over and its last processes are gone: its memory tier goes
    // (succeeded, failed or cancelled alike; the disk tier stays).
    // A per-host tier's folders are on the workers' hosts: they remove them.
    if (!IsActive(j) && j.draining_attempt == 0 && !j.ckpt.memory_tier_removed()) {
      j.ckpt.set_memory_tier_removed(true);  // recorded once it is done (RemoveEndedMemoryTiers)
      if (std::string dir = MemoryTierDirOf(j); !dir.empty() && !MemoryTierPerHost(j))
        memory_to_remove_.push_back({j.id, std::move(dir), LiveJobUsing(MemoryTierDirOf(j))});
    }
    if (!j.health.pending_failure.empty() && now >= j.health.pending_deadline_ms) {
      std::string why = std::move(j.health.pending_failure);
      j.health.pending_failure.clear();
      if (j.state == v1::LAUNCHING || j.state == v1::RUNNING) {
        // A peer's UNAVAILABLE with no exit seen: a rank died we cannot name.
        ExplainStall(table_, j, IsCollectiveTimeout(why) ? StallTrigger::kCollectiveTimeout : StallTrigger::kRankDied,
                     now);
        attempts_->Fail(j, why, true);
      }
    }
    // A write of the job's record the store refused: the job fails, not
    // retried (the store refuses the next attempt's writes as well).
    if (!j.store_failure.empty() && IsActive(j)) {
      attempts_->Fail(j, j.store_failure, /*retryable=*/false);
      continue;
    }
    switch (j.state) {
      case v1::QUEUED:
        if (JobScheduler::MayLaunch(j)) plans.push_back(PlanLaunch(j));
        break;
      case v1::RESTARTING:
        // The next generation starts only once the last one is gone (fencing
        // refuses its RPCs already; this keeps their processes apart too).
        if (now >= j.next_launch_ms && j.draining_attempt == 0 && JobScheduler::MayLaunch(j))
          plans.push_back(PlanLaunch(j));
        break;
      case v1::LAUNCHING:
      case v1::RUNNING:
        CheckRunning(j, view, now);
        break;
      default:
        break;
    }
  }
  return plans;
}

void ControlLoop::CheckRunning(Job& j, const LauncherView& view, int64_t now) {
  // External workers come when the user's launcher starts them: no
  // deadline until the first one joins (Join then starts the clock).
  if (IsExternal(j) && std::none_of(j.ranks.begin(), j.ranks.end(), [](const JobRank& r) { return r.registered; }))
    return;
  // Some ranks never came (external) or cannot be placed (a launcher's
  // count) within restart.elastic_wait_s: go on without them.
  if (elastic::MaybeShrink(j, now, table_, attempts_) || elastic::MaybeShrinkLaunched(j, now, table_, attempts_))
    return;
  // A cluster may queue the allocation for hours: the registration
  // clock starts when it does.
  auto pending = view.pending.find({j.id, j.attempt});
  if (j.launcher && j.state == v1::LAUNCHING && pending != view.pending.end()) {
    if (const std::string& why = pending->second; !why.empty() && why != j.queue_reason) {
      j.queue_reason = why;
      table_->Emit(j, "queued", why + "; the workers' registration deadline starts when it runs");
    }
    for (JobRank& r : j.ranks) {
      r.launched_ms = now;
      // Recover took adopted ranks for registered, but nothing runs yet:
      // they register once the allocation starts (not held to heartbeats).
      if (j.adopted && (r.state == "adopting" || r.state == "launched")) {
        r.registered = false;
        r.state = "launched";
      }
    }
    return;
  }
  std::vector<RankHealth> health;
  for (size_t r = 0; r < j.ranks.size(); ++r) {
    const JobRank& rk = j.ranks[r];
    health.push_back({static_cast<int>(r), rk.registered, rk.done, rk.launched_ms, rk.last_heartbeat_ms,
                      rk.last_progress_ms, rk.step});
  }
  HealthLimits limits;
  limits.register_timeout_s = opts_.register_timeout_s;
  limits.heartbeat_timeout_s = j.config.restart.heartbeat_timeout_s;
  limits.hang_timeout_s = j.config.restart.hang_timeout_s;
  if (!j.step_seconds.empty()) {
    double sum = 0;
    for (double s : j.step_seconds) sum += s;
    limits.recent_step_s = sum / j.step_seconds.size();
  }
  HealthFinding bad = FindHealthProblem(health, limits, now);
  if (bad.problem == HealthProblem::kHung) bad = BlameHang(bad, health, limits, now, StalledRanksOf(j, now));
  if (bad.problem == HealthProblem::kHung) ExplainStall(table_, j, StallTrigger::kHang, now);
  if (bad.problem == HealthProblem::kSilent)
    ExplainStall(table_, j, StallTrigger::kRankDied, now, bad.rank, "went silent past its heartbeat deadline");
  if (bad.problem != HealthProblem::kNone) {
    attempts_->Fail(j, bad.reason, true);
    return;
  }
  // health.straggler_action: restart, decided on the heartbeat path.
  if (!j.health.straggler_restart.empty()) attempts_->Fail(j, std::exchange(j.health.straggler_restart, ""), true);
}

std::string ControlLoop::LiveJobUsing(const std::string& dir) const {
  // Folders are unique per job (the id is in the name); this guards against
  // a memory.dir that names a folder inside (or above) another job's.
  for (const auto& [id, other] : table_->jobs()) {
    if (!IsActive(*other)) continue;
    const std::string theirs = MemoryTierDirOf(*other);
    if (!theirs.empty() && (IsInside(theirs, dir) || IsInside(dir, theirs))) return id;
  }
  return "";
}

void ControlLoop::RemoveEndedMemoryTiers() {
  // Off the lock (a large folder takes a while), then recorded with an event
  // in the state store: a coordinator restart does not remove it again.
  for (MemoryRemoval& r : memory_to_remove_) {
    std::string what;
    if (!r.live_job.empty()) {
      what = "kept the ended job's memory checkpoint tier " + r.dir + ": job " + r.live_job +
             ", which has not ended, keeps its memory steps there";
    } else if (Status st = shard::RemoveMemoryTier(r.dir); !st.ok()) {
      what = st.message() + " (not tried again)";
    } else {
      what = "removed the ended job's memory checkpoint tier " + r.dir;
    }
    auto lock = table_->Lock();
    auto it = table_->jobs().find(r.job_id);
    if (it != table_->jobs().end()) table_->Emit(*it->second, "memory_tier_removed", what);
  }
  memory_to_remove_.clear();
}

LaunchPlan ControlLoop::PlanLaunch(const Job& j) const {
  LaunchPlan plan;
  plan.job_id = j.id;
  plan.prev_attempt = j.attempt;
  // A later attempt resumes from the newest committed step whose checksums
  // verify; nothing committed yet: start as the first attempt did.
  plan.find_latest = j.attempt > 0;
  plan.checkpoint_dir = CheckpointDirOf(j);
  // A per-host tier is not read here: its newest commit is in the job.
  plan.memory_dir = MemoryTierPerHost(j) ? std::string() : MemoryTierDirOf(j);
  if (MemoryTierPerHost(j) && j.elastic.next_world == 0) plan.memory_step = j.ckpt.memory_step();
  plan.memory_per_host = MemoryTierPerHost(j);
  plan.fallback_resume = j.config.checkpoint.resume;
  plan.run_keys = shard::RunKeysOf(j.config);
  plan.run_fingerprint = shard::RunFingerprint(plan.run_keys);
  plan.peft = j.config.peft.enabled();
  if (j.elastic.next_world > 0) plan.world = j.elastic.next_world;
  plan.config = j.config;
  if (!plan.config.model.from_hf.empty())
    plan.config.model.from_hf = internal::Resolve(j.spec.workdir(), plan.config.model.from_hf);
  if (elastic::WantsCapacityBeforeLaunch(j)) {
    plan.capacity_launcher = j.launcher;
    plan.capacity_req = elastic::CapacityRequest(j, table_->allocator());
  }
  if (!opts_.allowed_roots.empty()) {
    plan.src = j.spec.source_path().empty() ? "job.yaml" : j.spec.source_path();
    plan.workdir = j.spec.workdir();
    plan.confine = JobPaths(j.config, plan.workdir);
    plan.confine.push_back({"checkpoint.dir/" + j.config.name, plan.checkpoint_dir, false});
  }
  return plan;
}

void ControlLoop::RunLaunch(LaunchPlan plan) {
  // Paths are judged where they lead now, not where they led at submission.
  if (Status st = CheckConfined(plan.src, plan.workdir, plan.confine, opts_.allowed_roots); !st.ok()) {
    auto lock = table_->Lock();
    auto it = table_->jobs().find(plan.job_id);
    if (it == table_->jobs().end()) return;
    Job& j = *it->second;
    if (j.attempt == plan.prev_attempt && (j.state == v1::QUEUED || j.state == v1::RESTARTING))
      attempts_->Fail(j, st.message() + " (checked again at launch; was a symlink made after submission?)", false);
    return;
  }
  if (plan.capacity_launcher) {
    // Off the lock: the launcher may probe its devices (a CUDA start).
    const StatusOr<int> capacity = plan.capacity_launcher->Capacity(plan.capacity_req);
    auto lock = table_->Lock();
    auto it = table_->jobs().find(plan.job_id);
    if (it == table_->jobs().end()) return;
    Job& j = *it->second;
    if (j.attempt != plan.prev_attempt || j.state != v1::RESTARTING) return;
    const int world = elastic::SizeRestart(j, capacity, opts_.now_ms(), table_);
    plan.world = world < j.config.parallel.world_size ? world : 0;
  }
  if (plan.world > 0) CheckElasticFit(plan);
  ResumeDecision chosen = ChooseResume(plan);
  const int64_t disk_step = chosen.disk_step;
  LaunchRequest req;
  Launcher* launcher = nullptr;
  int attempt = 0;
  {
    auto lock = table_->Lock();
    auto it = table_->jobs().find(plan.job_id);
    if (it == table_->jobs().end()) return;
    Job& j = *it->second;
    // Still the launch that was decided? A cancel meanwhile wins.
    if (j.attempt != plan.prev_attempt || (j.state != v1::QUEUED && j.state != v1::RESTARTING)) return;
    if (!chosen.refused.ok()) {  // as the trainer refused it before, in one line, before any worker starts
      attempts_->Fail(j, std::string(chosen.refused.message()), false);
      return;
    }
    // Begin is false for external jobs too (nothing to launch: their
    // workers join), after it began the attempt.
    const bool launch = attempts_->Begin(j, chosen.resume, &req, chosen.this_run_only);
    if (j.attempt == plan.prev_attempt + 1) SayResumeFallbacks(j, plan, chosen.skipped, disk_step);
    // A per-host memory step newer than every good disk step: the workers
    // assemble it on their hosts (fetching what a replaced host lacks) and
    // fall back to `resume` together if some shard is on no host.
    if (j.attempt == plan.prev_attempt + 1 && plan.find_latest && plan.memory_step > disk_step &&
        plan.memory_step == j.ckpt.memory_step()) {
      const int older = j.ckpt.PlanMemoryResume(disk_step);
      j.progress.set_step(j.ckpt.memory_step());
      table_->Emit(j, "resume_plan",
                   "resuming from memory step " + std::to_string(j.ckpt.memory_step()) + " (committed on the ranks' hosts; " +
                       (older > 0 ? "then the " + std::to_string(older) + " older memory step(s), then " : "") +
                       (disk_step >= 0 ? "disk step " + std::to_string(disk_step) : std::string("from scratch")) +
                       " if some shard is on no host)");
    }
    if (!launch) return;
    launcher = j.launcher;
    attempt = j.attempt;
  }
  StatusOr<std::vector<int>> pids = runner_->Launch(launcher, req, attempt);
  auto lock = table_->Lock();
  attempts_->FinishLaunch(plan.job_id, attempt, pids);
}

ResumeDecision ControlLoop::ChooseResume(const LaunchPlan& plan) const {
  ResumeDecision d;
  if (plan.find_latest) {
    // Hashes every byte of the newest checkpoint. The newest good step of
    // either tier: a memory step newer than every disk step wins; a damaged
    // one falls back step by step, said in `skipped`.
    auto latest = shard::FindLatestGoodTieredStep(
        plan.checkpoint_dir, plan.memory_dir, /*verify_checksums=*/true,
        [&](const shard::Manifest& m) { return shard::IsThisRunsStep(m.run_fingerprint, plan.run_fingerprint); },
        &d.skipped);
    if (latest.ok() && !latest->dir.empty()) {
      d.resume = latest->dir;
      d.disk_step = latest->step;
      d.this_run_only = true;
      return d;
    }
  }
  if (plan.peft) {  // the LoRA trainable finds its adapters' checkpoints (lora_checkpoint.h)
    d.resume = plan.fallback_resume;
    return d;
  }
  // A restart that found no good step of this run starts from step 0 (its
  // resume_from_scratch event says why), unless the job file names a step.
  const bool by_auto = plan.fallback_resume == "auto";
  if (plan.find_latest && (by_auto || plan.fallback_resume == "none")) return d;
  // The first attempt: checkpoint.resume as the job file says it (auto, none
  // or a step folder).
  auto choice = shard::ChooseResumeStep(plan.fallback_resume, plan.checkpoint_dir, plan.run_keys,
                                        shard::MemoryDirToResumeFrom(plan.memory_dir, 1));
  if (!choice.ok()) {
    d.refused = choice.status();
    return d;
  }
  d.resume = choice->step_dir;
  d.this_run_only = by_auto && !choice->step_dir.empty();
  d.skipped = std::move(choice->events);  // a step folder's: none
  return d;
}

void ControlLoop::SayResumeFallbacks(Job& j, const LaunchPlan& plan, const std::vector<std::string>& skipped,
                                     int64_t found_step) {
  for (const std::string& line : skipped)
    table_->Emit(j, line.rfind("starting from step 0", 0) == 0 ? "resume_from_scratch" : "resume_skipped", line);
  if (!plan.find_latest || found_step >= 0) return;
  // A restart that found nothing to resume: from the job file's choice. A
  // step folder named there resumes that; otherwise it starts over — said.
  const std::string& f = plan.fallback_resume;
  if (!f.empty() && f != "auto" && f != "none") return;
  // A per-host memory step is judged by the workers (they say why if not).
  if (plan.memory_step >= 0) return;
  table_->Emit(j, "resume_from_scratch",
               "starting from step 0: " +
                   (!skipped.empty() ? "every committed step of this run failed its checks (" +
                                           std::to_string(skipped.size()) + " skipped, above)"
                    : plan.memory_per_host
                        ? std::string("no disk step of this run is committed, and this coordinator holds no "
                                      "commit of the hosts' memory tier (it keeps them in memory only: a restart "
                                      "of the coordinator forgets them)")
                        : std::string("no step of this run was committed before the failure")));
}

void ControlLoop::CheckElasticFit(const LaunchPlan& plan) {
  // The same plan as at submission (JobSubmission::ValidateSpec), at the
  // smaller size: each rank's shard grows as the ranks get fewer.
  auto catalog = shard::plan::LoadDefaultHardwareCatalog();
  if (!catalog.ok()) return;  // submission planned nothing either
  std::string no_gpu;
  auto probed = ProbedLocalCluster(*catalog, opts_.worker_bin, &no_gpu);
  Status fits = shard::plan::CheckFitsAtWorldSize(plan.config, plan.world, *catalog, plan.config.resources.cluster,
                                                  probed ? &*probed : nullptr);
  if (fits.ok()) return;
  auto lock = table_->Lock();
  auto it = table_->jobs().find(plan.job_id);
  if (it == table_->jobs().end()) return;
  Job& j = *it->second;
  if (j.attempt == plan.prev_attempt && j.elastic.next_world == plan.world) elastic::RefuseUnfit(j, plan.world, fits.message(), table_);
}

void ControlLoop::Start() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(stop_mu_);
    while (!stop_) {
      lock.unlock();
      Tick();
      lock.lock();
      stop_cv_.wait_for(lock, std::chrono::milliseconds(static_cast<int64_t>(opts_.tick_s * 1000)),
                        [&] { return stop_; });
    }
  });
  if (opts_.stall_forgive_s <= 0) return;
  pulse_thread_ = std::thread([this] {
    const auto period = std::chrono::milliseconds(static_cast<int64_t>(std::min(1.0, opts_.stall_forgive_s / 4) * 1000));
    std::unique_lock<std::mutex> lock(stop_mu_);
    while (!stop_) {
      lock.unlock();
      NoteAlive();
      lock.lock();
      stop_cv_.wait_for(lock, period, [&] { return stop_; });
    }
  });
}

void ControlLoop::NoteAlive() {
  auto lock = table_->Lock();
  table_->NoteAlive(opts_.now_ms());
}

void ControlLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (pulse_thread_.joinable()) pulse_thread_.join();
}

}  // namespace shardd
