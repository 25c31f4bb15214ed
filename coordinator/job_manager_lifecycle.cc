// JobManager's lifecycle half: the control loop (Tick), attempts started,
// ended and restarted, and the launchers' reports applied.
//
// Tick runs in phases so that nothing slow happens under mu_: it asks the
// launchers (exits, queue state, what still runs) without mu_; decides under
// mu_; then for each launch resolves the resume point (verifying checksums
// of the newest checkpoint: minutes at 70B), starts the attempt under mu_,
// calls Launch without it, and applies the result under mu_ again only if
// the job is still in that attempt.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <tuple>

#include "coordinator/health_monitor.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/rank_log.h"
#include "coordinator/state/auth.h"
#include "shard/ckpt/catalog.h"
#include "shard/common/logging.h"
#include "shard/spec/run_fingerprint.h"

namespace fs = std::filesystem;

namespace shardd {
namespace {

using internal::Fmt;

constexpr int kExitBadInput = 2;  // shardd-worker's code for a job that can never run

}  // namespace

// ---------------------------------------------------------------------------
// Launcher calls, outside mu_

void JobManager::QueueTerminateLocked(const Job& j, int attempt, bool force) {
  if (j.launcher) terminates_.push_back({j.launcher, j.id, attempt, force});
}

void JobManager::RunTerminates() {
  std::vector<TerminateCall> calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls.swap(terminates_);
  }
  for (const TerminateCall& t : calls) t.launcher->Terminate(t.job_id, t.attempt, t.force);
}

void JobManager::TryRunTerminates() {
  std::unique_lock<std::mutex> tick(tick_mu_, std::try_to_lock);
  if (tick.owns_lock()) RunTerminates();
}

JobManager::LauncherView JobManager::ObserveLaunchers() {
  // Which attempts to ask about, named under mu_.
  std::vector<std::tuple<Launcher*, std::string, int>> running_q, pending_q;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, jp] : jobs_) {
      const Job& j = *jp;
      if (!j.launcher) continue;
      if (j.draining_attempt > 0) running_q.emplace_back(j.launcher, j.id, j.draining_attempt);
      // An exit seen in this Tick may end the current attempt: ask about it too.
      if (Active(j) && j.attempt > 0 && j.attempt != j.draining_attempt)
        running_q.emplace_back(j.launcher, j.id, j.attempt);
      if (j.state == v1::LAUNCHING) pending_q.emplace_back(j.launcher, j.id, j.attempt);
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
  return view;
}

// ---------------------------------------------------------------------------
// The control loop

void JobManager::Tick() {
  std::lock_guard<std::mutex> serial(tick_mu_);
  RunTerminates();  // queued by RPCs (a cancel) while the last Tick was busy
  const LauncherView view = ObserveLaunchers();
  std::vector<LaunchPlan> plans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    plans = DecideLocked(view);
  }
  RunTerminates();
  for (const LaunchPlan& plan : plans) {
    RunLaunch(plan);
    RunTerminates();  // a cancel that arrived during the launch reaches its workers now
  }
}

std::vector<JobManager::LaunchPlan> JobManager::DecideLocked(const LauncherView& view) {
  const int64_t now = opts_.now_ms();
  NoteAliveLocked(now);
  rendezvous_.ExpireWaiters(now);
  for (const RankExit& e : view.exits) {
    auto it = jobs_.find(e.job_id);
    if (it == jobs_.end()) continue;
    Job& j = *it->second;
    if (e.attempt != j.attempt || !Active(j) || j.state == v1::RESTARTING) continue;  // a drained attempt
    ApplyExitLocked(j, e);
  }
  ScheduleLocked(now);
  std::vector<LaunchPlan> plans;
  for (auto& [id, jp] : jobs_) {
    Job& j = *jp;
    if (j.draining_attempt > 0) {
      auto running = view.running.find({j.id, j.draining_attempt});
      if (!j.launcher || (running != view.running.end() && running->second == 0)) {
        j.draining_attempt = 0;
      } else if (now >= j.kill_at_ms) {
        QueueTerminateLocked(j, j.draining_attempt, /*force=*/true);
      }
    }
    if (!j.pending_failure.empty() && now >= j.pending_deadline_ms) {
      std::string why = std::move(j.pending_failure);
      j.pending_failure.clear();
      if (j.state == v1::LAUNCHING || j.state == v1::RUNNING) FailAttemptLocked(j, why, true);
    }
    switch (j.state) {
      case v1::QUEUED:
        if (MayLaunchLocked(j)) plans.push_back(PlanLaunchLocked(j));
        break;
      case v1::RESTARTING:
        // The next generation starts only once the last one is gone (fencing
        // refuses its RPCs already; this keeps their processes apart too).
        if (now >= j.next_launch_ms && j.draining_attempt == 0 && MayLaunchLocked(j)) plans.push_back(PlanLaunchLocked(j));
        break;
      case v1::LAUNCHING:
      case v1::RUNNING:
        CheckRunningLocked(j, view, now);
        break;
      default:
        break;
    }
  }
  return plans;
}

void JobManager::NoteAliveLocked(int64_t now) {
  const int64_t gap_ms = now - last_alive_ms_;
  const bool stalled = opts_.stall_forgive_s > 0 && last_alive_ms_ > 0 && gap_ms > opts_.stall_forgive_s * 1000;
  last_alive_ms_ = std::max(last_alive_ms_, now);
  if (!stalled) return;
  int forgiven = 0;
  for (auto& [id, jp] : jobs_) {
    Job& j = *jp;
    if (j.state != v1::LAUNCHING && j.state != v1::RUNNING) continue;
    for (Rank& r : j.ranks) {
      r.launched_ms = std::min(now, r.launched_ms + gap_ms);
      r.last_heartbeat_ms = std::min(now, r.last_heartbeat_ms + gap_ms);
      r.last_progress_ms = std::min(now, r.last_progress_ms + gap_ms);
    }
    ++forgiven;
  }
  if (forgiven > 0)
    LOG_WARN("coordinator: no health check, heartbeat or liveness pulse ran for {:.1f} s (this process was "
             "stalled); the workers of {} running job(s) are not held to that gap",
             gap_ms / 1000.0, forgiven);
}

void JobManager::CheckRunningLocked(Job& j, const LauncherView& view, int64_t now) {
  // External workers come when the user's launcher starts them: no
  // deadline until the first one joins (Join then starts the clock).
  if (External(j) && std::none_of(j.ranks.begin(), j.ranks.end(), [](const Rank& r) { return r.registered; }))
    return;
  // A cluster may queue the allocation for hours: the registration
  // clock starts when it does.
  auto pending = view.pending.find({j.id, j.attempt});
  if (j.launcher && j.state == v1::LAUNCHING && pending != view.pending.end()) {
    if (const std::string& why = pending->second; !why.empty() && why != j.queue_reason) {
      j.queue_reason = why;
      EmitLocked(j, "queued", why + "; the workers' registration deadline starts when it runs");
    }
    for (Rank& r : j.ranks) {
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
    const Rank& rk = j.ranks[r];
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
  std::string bad = CheckHealth(health, limits, now);
  if (!bad.empty()) FailAttemptLocked(j, bad, true);
}

// ---------------------------------------------------------------------------
// Attempts

JobManager::LaunchPlan JobManager::PlanLaunchLocked(Job& j) const {
  LaunchPlan plan;
  plan.job_id = j.id;
  plan.prev_attempt = j.attempt;
  // A later attempt resumes from the newest committed step whose checksums
  // verify; nothing committed yet: start as the first attempt did.
  plan.find_latest = j.attempt > 0;
  plan.checkpoint_dir = CheckpointJobDir(j);
  plan.fallback_resume = j.config.checkpoint.resume;
  plan.run_fingerprint = shard::RunFingerprint(shard::RunKeysOf(j.config));
  if (!opts_.allowed_roots.empty()) {
    plan.src = j.spec.source_path().empty() ? "job.yaml" : j.spec.source_path();
    plan.workdir = j.spec.workdir();
    plan.confine = JobPaths(j.config, plan.workdir);
    plan.confine.push_back({"checkpoint.dir/" + j.config.name, plan.checkpoint_dir, false});
  }
  return plan;
}

void JobManager::RunLaunch(const LaunchPlan& plan) {
  // Paths are judged where they lead now, not where they led at submission.
  if (Status st = CheckConfined(plan.src, plan.workdir, plan.confine, opts_.allowed_roots); !st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(plan.job_id);
    if (it == jobs_.end()) return;
    Job& j = *it->second;
    if (j.attempt == plan.prev_attempt && (j.state == v1::QUEUED || j.state == v1::RESTARTING))
      FailAttemptLocked(j, st.message() + " (checked again at launch; was a symlink made after submission?)", false);
    return;
  }
  std::string resume = plan.fallback_resume;
  if (plan.find_latest) {
    // Hashes every byte of the newest checkpoint: never under mu_.
    auto latest = shard::FindLatestGoodStep(plan.checkpoint_dir, /*verify_checksums=*/true,
                                            [&](const shard::Manifest& m) {
                                              return shard::IsThisRunsStep(m.run_fingerprint, plan.run_fingerprint);
                                            });
    if (latest.ok() && !latest->empty()) resume = *latest;
  }
  LaunchRequest req;
  Launcher* launcher = nullptr;
  int attempt = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(plan.job_id);
    if (it == jobs_.end()) return;
    Job& j = *it->second;
    // Still the launch that was decided? A cancel meanwhile wins.
    if (j.attempt != plan.prev_attempt || (j.state != v1::QUEUED && j.state != v1::RESTARTING)) return;
    if (!BeginAttemptLocked(j, resume, &req)) return;
    launcher = j.launcher;
    attempt = j.attempt;
  }
  // sbatch / kubectl apply / fork+exec: never under mu_.
  LOG_DEBUG("job {} attempt {}: launching {} rank(s) with the {} launcher ({} in {}, logs in {}, dialing {})",
            req.job_id, attempt, req.world, launcher->name(), req.worker_bin, req.workdir, req.log_dir,
            req.coordinator);
  StatusOr<std::vector<int>> pids = launcher->Launch(req);
  if (pids.ok()) LOG_DEBUG("job {} attempt {}: launched {} process(es)", req.job_id, attempt, pids->size());
  else LOG_DEBUG("job {} attempt {}: launch failed: {}", req.job_id, attempt, pids.status().ToString());
  std::lock_guard<std::mutex> lock(mu_);
  FinishLaunchLocked(plan.job_id, attempt, pids);
}

bool JobManager::BeginAttemptLocked(Job& j, const std::string& resume, LaunchRequest* req) {
  const int world = j.config.parallel.world_size;
  j.attempt += 1;
  j.first_report_ms.clear();  // an older attempt's uncommitted reports time nothing now
  j.previous_token_hash = j.token_hash;
  j.token = External(j) ? ExternalWorkerToken(j.join_token, j.attempt) : NewToken();
  j.token_hash = HashToken(j.token);
  j.committer->Reset();
  j.step_seconds.clear();
  j.pending_failure.clear();
  j.queue_reason.clear();
  j.adopted = false;
  j.nothing_trained = false;
  j.resume_from = resume;
  // The job's progress restarts where this attempt resumes.
  int64_t resume_step = 0;
  const std::string base = fs::path(j.resume_from).filename().string();
  if (base.rfind("step_", 0) == 0) resume_step = std::atoll(base.c_str() + 5);
  if (j.attempt > 1) j.progress.set_step(resume_step);
  const int64_t now = opts_.now_ms();
  j.ranks.assign(world, Rank{});
  for (Rank& r : j.ranks) r.launched_ms = now;
  SetStateLocked(j, v1::LAUNCHING, "launching",
                 std::to_string(world) + " worker(s), resume from " +
                     (j.resume_from.empty() ? std::string("scratch") : j.resume_from));

  if (External(j)) {
    EmitLocked(j, "waiting_for_workers",
               std::to_string(world) + " worker(s) may join: shardd-worker --coordinator " + opts_.coordinator_address +
                   " --job " + j.id + " with SHARDD_WORKER_TOKEN set to the job's join token (shardctl status " +
                   j.id + " --json shows it)");
    return false;
  }
  req->job_id = j.id;
  req->attempt = j.attempt;
  req->world = world;
  req->workdir = j.spec.workdir();
  req->log_dir = AttemptDir(j, j.attempt);
  req->coordinator = opts_.coordinator_address;
  req->worker_bin = opts_.worker_bin;
  req->env["SHARDD_WORKER_TOKEN"] = j.token;
  if (!opts_.worker_tls_ca.empty()) req->env["SHARDD_TLS_CA"] = opts_.worker_tls_ca;
  if (!opts_.worker_tls_cert.empty()) {
    req->env["SHARDD_TLS_CERT"] = opts_.worker_tls_cert;
    req->env["SHARDD_TLS_KEY"] = opts_.worker_tls_key;
  }
  req->job_name = j.config.name;
  req->resources = j.config.resources;
  AddPlacementEnvLocked(j, req);
  return true;
}

void JobManager::FinishLaunchLocked(const std::string& job_id, int attempt, const StatusOr<std::vector<int>>& pids) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& j = *it->second;
  if (j.attempt != attempt) return;  // cannot happen while Tick is serial; fencing all the same
  if (!pids.ok()) {
    if (j.state != v1::LAUNCHING) return;  // cancelled or failed meanwhile: nothing started
    // A cluster that is briefly unreachable (Unavailable, a command timeout)
    // is worth another attempt; anything else (a bad partition, a refused
    // manifest) will fail the same way again.
    const auto code = pids.status().code();
    const bool transient = code == shard::StatusCode::kUnavailable || code == shard::StatusCode::kDeadlineExceeded;
    FailAttemptLocked(j, "launch failed: " + pids.status().ToString(), transient);
    return;
  }
  // Recorded even when the attempt already ended (a cancel during the
  // launch): a restarted coordinator then still finds and stops them.
  for (size_t r = 0; r < pids->size() && r < j.ranks.size(); ++r) {
    j.ranks[r].pid = (*pids)[r];
    Status st = store_->PutWorker({j.id, j.attempt, static_cast<int>(r), (*pids)[r], "", "launched"});
    if (!st.ok()) LOG_ERROR("job {}: {}", j.id, st.ToString());
  }
}

void JobManager::EndAttemptLocked(Job& j) {
  if (j.attempt == 0) return;
  if (j.launcher) {
    // External workers are not ours to signal: they hear "attempt over" on their next call.
    QueueTerminateLocked(j, j.attempt, /*force=*/false);
    j.draining_attempt = j.attempt;
    j.kill_at_ms = opts_.now_ms() + static_cast<int64_t>(opts_.kill_grace_s * 1000);
  }
  v1::WorkerId id;
  id.set_job_id(j.id);
  id.set_attempt(j.attempt);
  rendezvous_.DropPrefix(KvPrefix(id));
}

void JobManager::FailAttemptLocked(Job& j, const std::string& reason, bool retryable) {
  EndAttemptLocked(j);
  const int max = j.config.restart.max_restarts;
  if (!retryable) {
    SetStateLocked(j, v1::FAILED, "failed", reason + " (not retryable)");
    return;
  }
  if (j.restarts >= max) {
    SetStateLocked(j, v1::FAILED, "failed",
                   "max_restarts (" + std::to_string(max) + ") exhausted; last failure: " + reason);
    return;
  }
  j.restarts += 1;
  j.next_launch_ms = opts_.now_ms() + static_cast<int64_t>(j.config.restart.backoff_s * 1000);
  SetStateLocked(j, v1::RESTARTING, "restarting",
                 reason + "; restart " + std::to_string(j.restarts) + " of " + std::to_string(max) + " in " +
                     Fmt(j.config.restart.backoff_s, "%.1f") + " s from the newest committed checkpoint");
}

void JobManager::PreemptAttemptLocked(Job& j, const std::string& reason) {
  EndAttemptLocked(j);
  j.progress.set_preemptions(j.progress.preemptions() + 1);
  j.next_launch_ms = opts_.now_ms() + static_cast<int64_t>(j.config.restart.backoff_s * 1000);
  SetStateLocked(j, v1::RESTARTING, "preempted",
                 reason + "; preemption " + std::to_string(j.progress.preemptions()) +
                     " (restarts are not charged); the next attempt resumes from the newest committed checkpoint");
}


std::string JobManager::CauseOfExitLocked(const Job& j, const RankExit& e) const {
  const Rank& r = j.ranks[e.rank];
  if (!r.error.empty()) return ": " + r.error;
  // A signal is not explained by what the rank logged before it.
  if (e.signal != 0 || e.exit_code <= 0) return "";
  const std::string line = LastErrorLineOfLog(opts_.state_dir, "jobs/" + j.id + "/attempt_" + std::to_string(e.attempt) +
                                                                   "/rank_" + std::to_string(e.rank) + ".log");
  return line.empty() ? "" : ": " + line;
}

void JobManager::ApplyExitLocked(Job& j, const RankExit& e) {
  const bool bad_input = e.signal == 0 && e.exit_code == kExitBadInput;
  if (e.rank == RankExit::kAllRanks) {
    // The whole allocation ended (a Slurm job, a Kubernetes Job).
    bool all_done = true, all_stopped = true;
    for (Rank& r : j.ranks) {
      all_done = all_done && r.done;
      all_stopped = all_stopped && (r.done || r.preempted);
      r.exited = true;
      if (r.done || r.preempted) r.state = r.done ? "exited" : "preempted";
    }
    if (all_done && e.signal == 0 && (e.exit_code == 0 || e.exit_code == -1)) return;
    if (all_stopped) {
      PreemptAttemptLocked(j, "every rank checkpointed and stopped on its launcher's signal");
      return;
    }
    for (Rank& r : j.ranks)
      if (!r.done && !r.preempted) r.state = "failed";
    std::string why = e.Describe();
    if (bad_input) why += " (bad input; see the rank logs in " + AttemptDir(j, j.attempt) + ")";
    FailAttemptLocked(j, why, !bad_input);
    return;
  }
  if (e.rank < 0 || e.rank >= static_cast<int>(j.ranks.size())) return;
  {
    Rank& r = j.ranks[e.rank];
    r.exited = true;
    if (e.signal == 0 && (e.exit_code == 0 || e.exit_code == -1) && r.done) {
      r.state = "exited";  // (-1: adopted, gone after reporting done)
      return;
    }
    if (r.preempted) {
      r.state = "preempted";  // it said why it stopped; the attempt ends when every rank has
      return;
    }
    if (e.signal == 0 && e.exit_code == -1) {
      FailAttemptLocked(j, "rank " + std::to_string(e.rank) + " (adopted pid " + std::to_string(r.pid) +
                               ") is gone", true);
      return;
    }
    r.state = "failed";
    std::string why = e.Describe();
    if (e.signal == 0 && e.exit_code == 0) why += " before reporting done";
    why += CauseOfExitLocked(j, e);
    if (bad_input) why += " (bad input; see " + AttemptDir(j, j.attempt) + "/rank_" + std::to_string(e.rank) + ".log)";
    FailAttemptLocked(j, why, !bad_input);
  }
}


void JobManager::Start() {
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

void JobManager::NoteAlive() {
  std::lock_guard<std::mutex> lock(mu_);
  NoteAliveLocked(opts_.now_ms());
}

void JobManager::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (pulse_thread_.joinable()) pulse_thread_.join();
}

}  // namespace shardd
