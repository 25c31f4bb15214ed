#include "coordinator/job_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "coordinator/auth.h"
#include "coordinator/health_monitor.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/job_paths.h"
#include "coordinator/probed_cluster.h"
#include "shard/ckpt/catalog.h"
#include "shard/spec/llama_config.h"
#include "shard/train/resume_choice.h"
#include "shard/train/run_fingerprint.h"
#include "shard/plan/hardware.h"
#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"

namespace fs = std::filesystem;

namespace shardd {

namespace {
const char* kReadOnly = "this is a read-only view of the state dir (no coordinator is running): start shardd";
}  // namespace
namespace {

using internal::Fmt;
using internal::Resolve;

constexpr int kExitBadInput = 2;  // shardd-worker's code for a job that can never run

int64_t SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string JobStateName(v1::JobState s) {
  switch (s) {
    case v1::QUEUED: return "QUEUED";
    case v1::LAUNCHING: return "LAUNCHING";
    case v1::RUNNING: return "RUNNING";
    case v1::RESTARTING: return "RESTARTING";
    case v1::SUCCEEDED: return "SUCCEEDED";
    case v1::FAILED: return "FAILED";
    case v1::CANCELLED: return "CANCELLED";
    default: return "UNKNOWN";
  }
}

bool IsTerminal(v1::JobState s) { return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED; }

JobManager::JobManager(JobManagerOptions opts, StateStore* store, Launcher* launcher)
    : opts_(std::move(opts)), store_(store) {
  if (!opts_.now_ms) opts_.now_ms = SystemNowMs;
  if (launcher) AddLauncher(launcher);
}

void JobManager::AddLauncher(Launcher* launcher) {
  std::lock_guard<std::mutex> lock(mu_);
  launchers_[launcher->name()] = launcher;
}

JobManager::~JobManager() { Stop(); }

bool JobManager::Active(const Job& j) const { return !IsTerminal(j.state); }

std::string JobManager::NewToken() const {
  auto t = RandomHex(24);
  SHARD_CHECK_MSG(t.ok(), "cannot read /dev/urandom");
  return *t;
}

std::string JobManager::CheckpointJobDir(const Job& j) const {
  return shard::CheckpointJobDir(j.config, j.spec.workdir());
}

std::string JobManager::AttemptDir(const Job& j, int attempt) const {
  return (fs::path(opts_.state_dir) / "jobs" / j.id / ("attempt_" + std::to_string(attempt))).string();
}

v1::JobStatus JobManager::StatusOf(const Job& j) const {
  v1::JobStatus s;
  s.set_id(j.id);
  s.set_name(j.name);
  s.set_state(j.state);
  s.set_attempt(j.attempt);
  s.set_restarts(j.restarts);
  s.set_max_restarts(j.config.restart.max_restarts);
  s.set_reason(j.reason);
  *s.mutable_progress() = j.progress;
  s.set_created_unix_ms(j.created_ms);
  s.set_updated_unix_ms(j.updated_ms);
  s.set_world_size(j.config.parallel.world_size);
  s.set_job_dir((fs::path(opts_.state_dir) / "jobs" / j.id).string());
  s.set_checkpoint_dir(CheckpointJobDir(j));
  s.set_launcher(shard::LauncherName(j.config.resources.launcher));
  s.set_join_token(j.join_token);
  const int64_t now = opts_.now_ms();
  for (size_t r = 0; r < j.ranks.size(); ++r) {
    const Rank& rk = j.ranks[r];
    v1::WorkerInfo* w = s.add_workers();
    w->set_rank(static_cast<int>(r));
    w->set_pid(rk.pid);
    w->set_hostname(rk.hostname);
    w->set_state(rk.state);
    w->set_step(rk.step);
    w->set_last_heartbeat_age_s(rk.registered ? (now - rk.last_heartbeat_ms) / 1000.0 : -1.0);
    w->set_launcher_id(rk.launcher_id);
    w->set_devices(rk.devices);
    w->set_rss_bytes(rk.rss_bytes);
    w->set_step_seconds(rk.step_seconds);
    w->set_tokens_per_s(rk.tokens_per_s);
  }
  return s;
}

JobRecord JobManager::RecordOf(const Job& j) const {
  JobRecord rec;
  rec.id = j.id;
  rec.name = j.name;
  rec.state = j.state;
  rec.attempt = j.attempt;
  rec.restarts = j.restarts;
  rec.reason = j.reason;
  rec.spec = j.spec.SerializeAsString();
  rec.progress = j.progress.SerializeAsString();
  rec.worker_token = j.token_hash;
  rec.join_token = j.join_token;
  rec.created_ms = j.created_ms;
  rec.updated_ms = j.updated_ms;
  rec.seq = j.seq;
  return rec;
}

void JobManager::EmitLocked(Job& j, const std::string& kind, const std::string& message) {
  j.updated_ms = opts_.now_ms();
  v1::JobEvent ev;
  ev.set_seq(++j.seq);
  ev.set_unix_ms(j.updated_ms);
  ev.set_job_id(j.id);
  ev.set_attempt(j.attempt);
  ev.set_kind(kind);
  ev.set_message(message);
  ev.set_state(j.state);
  *ev.mutable_progress() = j.progress;
  // The event and the job's new state in one transaction.
  EventRecord er{j.id, ev.seq(), ev.unix_ms(), j.attempt, kind, message, j.state};
  Status st = store_->AppendEvent(er, RecordOf(j));
  if (!st.ok()) LOG_ERROR("job {}: cannot persist event {}: {}", j.id, kind, st.ToString());
  LOG_INFO("job {} [{}] attempt {}: {}{}{}", j.id, JobStateName(j.state), j.attempt, kind,
           message.empty() ? "" : ": ", message);
  for (auto& [id, w] : watchers_)
    if (w.job_id == j.id) w.sink(ev);
}

void JobManager::SetStateLocked(Job& j, v1::JobState state, const std::string& kind, const std::string& reason) {
  j.state = state;
  j.reason = reason;
  EmitLocked(j, kind, reason);
}

StatusOr<JobManager::Job*> JobManager::FindLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return shard::NotFound("no job '" + job_id + "' (shardctl list shows the jobs)");
  return it->second.get();
}

// ---------------------------------------------------------------------------
// Submission

Status JobManager::ValidateSpecLocked(const v1::JobSpec& spec, shard::JobConfig* config, std::string* plan_summary,
                                      double* mfu_per_position_s) {
  const std::string src = spec.source_path().empty() ? "job.yaml" : spec.source_path();
  if (spec.yaml().size() > opts_.max_spec_bytes)
    return shard::InvalidArgument(src + ": the job file is " + std::to_string(spec.yaml().size()) +
                                  " bytes; the limit is " + std::to_string(opts_.max_spec_bytes));
  if (spec.workdir().empty() || !fs::path(spec.workdir()).is_absolute())
    return shard::InvalidArgument("job spec: workdir must be an absolute directory, got '" + spec.workdir() + "'");
  if (!fs::is_directory(spec.workdir()))
    return shard::NotFound("job spec: workdir " + spec.workdir() + " does not exist");
  std::vector<std::string> overrides(spec.overrides().begin(), spec.overrides().end());
  ASSIGN_OR_RETURN(*config, shard::ParseJobConfig(spec.yaml(), src, overrides));
  const shard::JobConfig& c = *config;
  // The name becomes part of paths (state and checkpoint dirs).
  const bool plain = !c.name.empty() && c.name != "." && c.name != ".." &&
                     std::all_of(c.name.begin(), c.name.end(), [](char ch) {
                       return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
                     });
  if (!plain)
    return shard::InvalidArgument(src + ": name: '" + c.name +
                                  "' must be a plain file name (letters, digits, '.', '_', '-')");
  const std::string launcher = shard::LauncherName(c.resources.launcher);
  if (c.resources.launcher != shard::Launcher::kExternal && !launchers_.count(launcher)) {
    std::string have;
    for (const auto& [name, l] : launchers_) have += (have.empty() ? "" : ", ") + name;
    return shard::Unimplemented(src + ": resources.launcher '" + launcher +
                                "' is not available in this coordinator (it has: " + have + ", external)");
  }
  if (c.resources.launcher != shard::Launcher::kExternal)
    if (Status st = launchers_.at(launcher)->CheckAvailable(); !st.ok())
      return Status(st.code(), src + ": resources.launcher " + launcher + ": " + st.message());
  const std::vector<JobPath> paths = JobPaths(c, spec.workdir());
  RETURN_IF_ERROR(CheckConfined(src, spec.workdir(), paths, opts_.allowed_roots));
  for (const JobPath& p : paths)
    if (p.must_exist && !fs::exists(p.path)) return shard::NotFound(src + ": " + p.key + ": " + p.path + " does not exist");
  // The model's config.json, read where the workers will read it: sizes past
  // sane bounds (num_hidden_layers: 10000000) are an error here, not a
  // bad_alloc in the planner or a failed attempt later.
  if (!c.model.from_hf.empty()) {
    auto model = shard::LlamaConfigFromHfDir(Resolve(spec.workdir(), c.model.from_hf));
    if (!model.ok() && model.status().code() != shard::StatusCode::kNotFound)
      return Status(model.status().code(), src + ": model.from_hf: " + model.status().message());
  }
  // The planner's verdict: a job that cannot fit is refused with its reasons.
  auto catalog = shard::plan::LoadDefaultHardwareCatalog();
  if (catalog.ok()) {
    std::string no_gpu;
    auto probed = ProbedLocalCluster(*catalog, opts_.worker_bin, &no_gpu);
    auto plan = shard::plan::PlanJob(c, *catalog, c.resources.cluster, probed ? &*probed : nullptr);
    if (plan.ok() && !plan->ok())
      return shard::FailedPrecondition(src + ": the planner says this job cannot run: " +
                                       shard::plan::PlanSummary(*plan) + " (shardctl plan " + src + " for advice)");
    *plan_summary = plan.ok() ? shard::plan::PlanSummary(*plan) : "plan skipped: " + plan.status().message();
    if (plan.ok() && !plan->cluster.cpu_only && plan->time.peak_tflops > 0)
      *mfu_per_position_s = plan->time.model_flops_per_token /
                            (c.parallel.world_size * plan->time.peak_tflops * 1e12);
  } else {
    *plan_summary = "plan skipped: " + catalog.status().message();
  }
  for (const auto& [id, other] : jobs_) {
    if (Active(*other) && other->config.name == c.name &&
        CheckpointJobDir(*other) == shard::CheckpointJobDir(c, spec.workdir()))
      return shard::FailedPrecondition(src + ": job " + other->id + " named '" + c.name +
                                       "' is still active and would share its checkpoint directory; cancel it or "
                                       "rename this job");
  }
  return shard::OkStatus();
}

StatusOr<v1::JobStatus> JobManager::Submit(const v1::JobSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (opts_.read_only) return shard::FailedPrecondition(kReadOnly);
  shard::JobConfig config;
  std::string plan;
  double mfu_per_position_s = 0;
  RETURN_IF_ERROR(ValidateSpecLocked(spec, &config, &plan, &mfu_per_position_s));
  auto j = std::make_unique<Job>();
  j->id = config.name + "-" + std::to_string(next_job_number_++);
  j->name = config.name;
  j->spec = spec;
  j->config = config;
  j->created_ms = opts_.now_ms();
  j->progress.set_total_steps(config.train.steps);
  j->progress.set_eta_s(-1);
  j->progress.set_last_committed_step(-1);
  j->progress.set_mfu(-1);
  j->mfu_per_position_s = mfu_per_position_s;
  j->committer = std::make_unique<CheckpointCommitter>(config.checkpoint.keep_last);
  if (External(*j)) j->join_token = NewToken();
  else j->launcher = launchers_.at(shard::LauncherName(config.resources.launcher));
  Job& ref = *j;
  jobs_[ref.id] = std::move(j);
  SetStateLocked(ref, v1::QUEUED, "submitted",
                 (spec.source_path().empty() ? std::string("job") : spec.source_path()) + ", " +
                     std::to_string(config.parallel.world_size) + " worker(s), " +
                     std::to_string(config.train.steps) + " steps; " + plan);
  return StatusOf(ref);
}

StatusOr<v1::JobStatus> JobManager::Get(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Job * j, FindLocked(job_id));
  return StatusOf(*j);
}

std::vector<v1::JobStatus> JobManager::List(bool include_finished) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::JobStatus> out;
  for (const auto& [id, j] : jobs_)
    if (include_finished || Active(*j)) out.push_back(StatusOf(*j));
  std::sort(out.begin(), out.end(),
            [](const v1::JobStatus& a, const v1::JobStatus& b) { return a.created_unix_ms() < b.created_unix_ms(); });
  return out;
}

StatusOr<v1::JobStatus> JobManager::Cancel(const std::string& job_id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Job * j, FindLocked(job_id));
  if (!Active(*j)) return StatusOf(*j);  // idempotent
  if (opts_.read_only) return shard::FailedPrecondition(kReadOnly);
  EndAttemptLocked(*j);
  SetStateLocked(*j, v1::CANCELLED, "cancelled", reason.empty() ? "cancelled by the user" : reason);
  return StatusOf(*j);
}

// ---------------------------------------------------------------------------
// Attempts

void JobManager::LaunchLocked(Job& j) {
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
  if (j.attempt == 1) {
    j.resume_from = j.config.checkpoint.resume;
  } else {
    // Only this run's steps (or unknown ones): another run that shares the
    // directory is never resumed by a restart.
    const std::string fp = shard::RunFingerprint(shard::RunKeysOf(j.config));
    auto latest = shard::FindLatestGoodStep(CheckpointJobDir(j), /*verify_checksums=*/true,
                                            [&](const shard::Manifest& m) {
                                              return shard::IsThisRunsStep(m.run_fingerprint, fp);
                                            });
    if (latest.ok() && !latest->empty()) {
      j.resume_from = *latest;
    } else {
      j.resume_from = j.config.checkpoint.resume;  // nothing committed yet: start as the first attempt did
    }
  }
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
    return;
  }
  LaunchRequest req;
  req.job_id = j.id;
  req.attempt = j.attempt;
  req.world = world;
  req.workdir = j.spec.workdir();
  req.log_dir = AttemptDir(j, j.attempt);
  req.coordinator = opts_.coordinator_address;
  req.worker_bin = opts_.worker_bin;
  req.env["SHARDD_WORKER_TOKEN"] = j.token;
  if (!opts_.worker_tls_ca.empty()) req.env["SHARDD_TLS_CA"] = opts_.worker_tls_ca;
  if (!opts_.worker_tls_cert.empty()) {
    req.env["SHARDD_TLS_CERT"] = opts_.worker_tls_cert;
    req.env["SHARDD_TLS_KEY"] = opts_.worker_tls_key;
  }
  req.job_name = j.config.name;
  req.resources = j.config.resources;
  auto pids = j.launcher->Launch(req);
  if (!pids.ok()) {
    // A cluster that is briefly unreachable (Unavailable, a command timeout)
    // is worth another attempt; anything else (a bad partition, a refused
    // manifest) will fail the same way again.
    const auto code = pids.status().code();
    const bool transient = code == shard::StatusCode::kUnavailable || code == shard::StatusCode::kDeadlineExceeded;
    FailAttemptLocked(j, "launch failed: " + pids.status().ToString(), transient);
    return;
  }
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
    j.launcher->Terminate(j.id, j.attempt, /*force=*/false);
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

void JobManager::ProcessExitsLocked() {
  for (const auto& [name, launcher] : launchers_) {
    std::vector<RankExit> exits = launcher->Poll();
    // Exits seen together (a busy coordinator, or survivors that left at once)
    // come in rank order, not in the order the ranks died. A rank killed by a
    // signal is the likely cause, and its peers' "failed" exits the effect:
    // apply those first, so the restart names the cause.
    std::stable_partition(exits.begin(), exits.end(), [](const RankExit& e) { return e.signal != 0; });
    for (const RankExit& e : exits) {
      auto it = jobs_.find(e.job_id);
      if (it == jobs_.end()) continue;
      Job& j = *it->second;
      if (e.attempt != j.attempt || !Active(j) || j.state == v1::RESTARTING) continue;  // a drained attempt
      ApplyExitLocked(j, e);
    }
  }
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
    if (bad_input) why += " (bad input; see " + AttemptDir(j, j.attempt) + "/rank_" + std::to_string(e.rank) + ".log)";
    FailAttemptLocked(j, why, !bad_input);
  }
}

void JobManager::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = opts_.now_ms();
  rendezvous_.ExpireWaiters(now);

  ProcessExitsLocked();

  for (auto& [id, jp] : jobs_) {
    Job& j = *jp;
    if (j.draining_attempt > 0) {
      if (!j.launcher || j.launcher->Running(j.id, j.draining_attempt) == 0) {
        j.draining_attempt = 0;
      } else if (now >= j.kill_at_ms) {
        j.launcher->Terminate(j.id, j.draining_attempt, /*force=*/true);
      }
    }
    if (!j.pending_failure.empty() && now >= j.pending_deadline_ms) {
      std::string why = std::move(j.pending_failure);
      j.pending_failure.clear();
      if (j.state == v1::LAUNCHING || j.state == v1::RUNNING) FailAttemptLocked(j, why, true);
    }
    switch (j.state) {
      case v1::QUEUED:
        LaunchLocked(j);
        break;
      case v1::RESTARTING:
        // The next generation starts only once the last one is gone (fencing
        // refuses its RPCs already; this keeps their processes apart too).
        if (now >= j.next_launch_ms && j.draining_attempt == 0) LaunchLocked(j);
        break;
      case v1::LAUNCHING:
      case v1::RUNNING: {
        // External workers come when the user's launcher starts them: no
        // deadline until the first one joins (Join then starts the clock).
        if (External(j) && std::none_of(j.ranks.begin(), j.ranks.end(), [](const Rank& r) { return r.registered; }))
          break;
        // A cluster may queue the allocation for hours: the registration
        // clock starts when it does.
        if (j.launcher && j.state == v1::LAUNCHING && j.launcher->Pending(j.id, j.attempt)) {
          if (std::string why = j.launcher->PendingReason(j.id, j.attempt); !why.empty() && why != j.queue_reason) {
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
          break;
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
        break;
      }
      default:
        break;
    }
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
}

void JobManager::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shardd
