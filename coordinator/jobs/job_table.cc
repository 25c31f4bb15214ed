// The job table: status snapshots, stored records, events and fencing.
#include "coordinator/jobs/job_table.h"

#include <algorithm>
#include <filesystem>

#include "coordinator/state/auth.h"
#include "proto/codec/attempt_ended.h"
#include "shard/common/logging.h"

namespace fs = std::filesystem;

namespace shardd {

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

std::string CheckpointDirOf(const Job& j) { return shard::CheckpointJobDir(j.config, j.spec.workdir()); }

bool MemoryTierPerHost(const Job& j) {
  return j.config.checkpoint.memory.enabled() && j.config.resources.launcher != shard::Launcher::kLocal;
}

std::string MemoryTierDirOf(const Job& j) {
  if (!j.config.checkpoint.memory.enabled()) return "";
  if (!j.ckpt.stored_memory_dir().empty()) return j.ckpt.stored_memory_dir();
  return shard::MemoryCheckpointJobDir(j.config, j.spec.workdir(), j.id, j.created_ms);
}

std::string AttemptKvPrefix(const v1::WorkerId& id) { return id.job_id() + "/" + std::to_string(id.attempt()) + "/"; }

std::string NewJobToken() {
  auto t = RandomHex(24);
  SHARD_CHECK_MSG(t.ok(), "cannot read /dev/urandom");
  return *t;
}

StatusOr<Job*> JobTable::Find(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return shard::NotFound("no job '" + job_id + "' (shardctl list shows the jobs)");
  return it->second.get();
}

Job& JobTable::Insert(std::unique_ptr<Job> job) {
  Job& ref = *job;
  jobs_[ref.id] = std::move(job);
  return ref;
}

v1::JobStatus JobTable::StatusOf(const Job& j) const {
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
  if (j.attempt > 0) s.set_attempt_world_size(static_cast<int>(j.ranks.size()));
  s.set_job_dir((fs::path(opts_.state_dir) / "jobs" / j.id).string());
  s.set_checkpoint_dir(CheckpointDirOf(j));
  s.set_launcher(shard::LauncherName(j.config.resources.launcher));
  s.set_join_token(j.join_token);
  s.set_priority(j.config.priority);
  s.set_queue_position(j.placement.queue_position);
  if (j.placement.demand) s.set_demand(j.placement.demand->Describe());
  if (const sched::Placement* p = alloc_ && j.placement.placed ? alloc_->HeldBy(j.id) : nullptr) s.set_placement(p->Describe());
  const int64_t now = opts_.now_ms();
  for (size_t r = 0; r < j.ranks.size(); ++r) {
    const JobRank& rk = j.ranks[r];
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
    w->set_compute_seconds(rk.compute_seconds);
    w->set_straggler(rk.straggler);
    w->set_collective(DescribeLatest(rk.collectives, now));
  }
  if (!j.health.stall.text().empty()) *s.mutable_stall() = j.health.stall;
  return s;
}

JobRecord JobTable::RecordOf(const Job& j) const {
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
  if (!j.health.stall.text().empty()) rec.stall = j.health.stall.SerializeAsString();
  rec.created_ms = j.created_ms;
  rec.updated_ms = j.updated_ms;
  rec.seq = j.seq;
  rec.memory_dir = MemoryTierDirOf(j);
  rec.memory_tier_removed = j.ckpt.memory_tier_removed();
  return rec;
}

void JobTable::Emit(Job& j, const std::string& kind, const std::string& message) {
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
  if (!st.ok()) NoteStoreFailure(j, "event " + kind, st);
  LOG_INFO("job {} [{}] attempt {}: {}{}{}", j.id, JobStateName(j.state), j.attempt, kind,
           message.empty() ? "" : ": ", message);
  Publish(ev);
}

void JobTable::NoteStoreFailure(Job& j, const std::string& what, const Status& st) {
  LOG_ERROR("job {}: the state store could not record {}: {}", j.id, what, st.ToString());
  if (!j.store_failure.empty()) return;
  j.store_failure = "the state store could not record " + what + " (" + st.message() +
                    "); a run whose record is incomplete does not succeed";
}

void JobTable::SetState(Job& j, v1::JobState state, const std::string& kind, const std::string& reason) {
  j.state = state;
  j.reason = reason;
  Emit(j, kind, reason);
}

void JobTable::Publish(const v1::JobEvent& ev) {
  for (auto& [id, w] : watchers_)
    if (w.job_id == ev.job_id()) w.sink(ev);
}

int64_t JobTable::AddWatcher(const std::string& job_id, EventSink sink) {
  int64_t id = next_watch_id_++;
  watchers_[id] = {job_id, std::move(sink)};
  return id;
}

StatusOr<Job*> JobTable::CheckWorker(const v1::WorkerId& id, const std::string& token) {
  if (opts_.read_only) return shard::FailedPrecondition("read-only view of the state dir: no worker calls");
  ASSIGN_OR_RETURN(Job * j, Find(id.job_id()));
  // Token first: a caller without the attempt's token learns nothing more.
  if (TokenMatchesHash(token, j->previous_token_hash))
    return shard::FailedPrecondition(AttemptEndedMessage("stale attempt " + std::to_string(id.attempt()) + " of job " +
                                                         id.job_id() + " (current attempt " +
                                                         std::to_string(j->attempt) + "); exit"));
  if (!TokenMatchesHash(token, j->token_hash) || j->attempt == 0)
    return shard::Unauthenticated("worker call for job " + id.job_id() + ": missing or wrong worker token");
  if (id.attempt() != j->attempt)
    return shard::FailedPrecondition(AttemptEndedMessage("stale attempt " + std::to_string(id.attempt()) + " of job " +
                                                         id.job_id() + " (current attempt " +
                                                         std::to_string(j->attempt) + "); exit"));
  if (!IsActive(*j) || j->state == v1::RESTARTING)
    return AttemptEnded("job " + id.job_id() + " attempt " + std::to_string(id.attempt()) + " is over (" +
                        JobStateName(j->state) + "); exit");
  if (id.rank() < 0 || id.rank() >= static_cast<int>(j->ranks.size()))
    return shard::InvalidArgument("rank " + std::to_string(id.rank()) + " out of range for job " + id.job_id());
  return j;
}

void JobTable::NoteAlive(int64_t now) {
  const int64_t gap_ms = now - last_alive_ms_;
  const bool stalled = opts_.stall_forgive_s > 0 && last_alive_ms_ > 0 && gap_ms > opts_.stall_forgive_s * 1000;
  last_alive_ms_ = std::max(last_alive_ms_, now);
  if (!stalled) return;
  int forgiven = 0;
  for (auto& [id, jp] : jobs_) {
    Job& j = *jp;
    if (j.state != v1::LAUNCHING && j.state != v1::RUNNING) continue;
    for (JobRank& r : j.ranks) {
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

}  // namespace shardd
