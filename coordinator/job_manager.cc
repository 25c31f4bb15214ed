// JobManager's core: construction, the job record, status snapshots and
// events. Submission, lifecycle, worker calls, recovery and queries live in
// the job_manager_*.cc files beside this one.
#include "coordinator/job_manager.h"

#include <chrono>
#include <filesystem>

#include "coordinator/job_manager_internal.h"
#include "coordinator/state/auth.h"
#include "shard/common/logging.h"

namespace fs = std::filesystem;

namespace shardd {

namespace {

using internal::Resolve;

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
  if (opts_.local_capacity) alloc_ = std::make_unique<sched::HostAllocator>(*opts_.local_capacity);
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
  s.set_priority(j.config.priority);
  s.set_queue_position(j.queue_position);
  if (j.demand) s.set_demand(j.demand->Describe());
  if (const sched::Placement* p = alloc_ && j.placed ? alloc_->HeldBy(j.id) : nullptr) s.set_placement(p->Describe());
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

}  // namespace shardd
