// Recovery at start (job_recovery.h).
#include "coordinator/jobs/job_recovery.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "coordinator/jobs/job_manager_internal.h"
#include "shard/ckpt/catalog.h"
#include "shard/ckpt/checkpoint_tier.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"
#include "shard/spec/elastic_world.h"
#include "shard/spec/run_fingerprint.h"

namespace shardd {

Status JobRecovery::Recover() {
  // Before Start and before any RPC: Adopt may ask the cluster under the job lock here.
  std::lock_guard<std::mutex> serial(runner_->serial());
  auto lock = table_->Lock();
  StateStore* store = table_->store();
  ASSIGN_OR_RETURN(int64_t max_number, store->MaxJobNumber());
  table_->set_next_job_number(max_number + 1);
  ASSIGN_OR_RETURN(std::vector<JobRecord> records, store->LoadJobs());
  const int64_t now = opts_.now_ms();
  for (JobRecord& rec : records) {
    std::unique_ptr<Job> j = LoadJob(rec);
    if (!j) continue;
    std::vector<std::string> overrides(j->spec.overrides().begin(), j->spec.overrides().end());
    auto config = shard::ParseJobConfig(j->spec.yaml(), j->spec.source_path(), overrides);
    if (!config.ok()) {
      KeepUnparsable(std::move(j), config.status());
      continue;
    }
    j->config = *config;
    // Stored before folders carried the job's id: it keeps the folder it has.
    if (j->ckpt.stored_memory_dir().empty() && j->config.checkpoint.memory.enabled())
      j->ckpt.set_stored_memory_dir(shard::MemoryCheckpointJobDir(j->config, j->spec.workdir()));
    j->ckpt.Init(j->config.checkpoint.keep_last, j->config.checkpoint.memory.keep_last);
    j->launcher = runner_->Find(shard::LauncherName(j->config.resources.launcher));
    Job& ref = table_->Insert(std::move(j));
    if (opts_.read_only) continue;  // as stored: nothing is adopted, watched or changed
    RETURN_IF_ERROR(Resume(ref, now));
  }
  // Adoption above and the placements here under the same locks: no Tick
  // can place a queued job on an adopted attempt's devices in between.
  if (!opts_.read_only) RETURN_IF_ERROR(sched_->RestorePlacements());
  return shard::OkStatus();
}

std::unique_ptr<Job> JobRecovery::LoadJob(const JobRecord& rec) {
  auto j = std::make_unique<Job>();
  j->id = rec.id;
  j->name = rec.name;
  if (!j->spec.ParseFromString(rec.spec)) {
    LOG_ERROR("job {}: stored spec does not parse; skipped", rec.id);
    return nullptr;
  }
  j->progress.ParseFromString(rec.progress);
  j->state = static_cast<v1::JobState>(rec.state);
  j->attempt = rec.attempt;
  j->restarts = rec.restarts;
  j->reason = rec.reason;
  j->token_hash = rec.worker_token;  // StateStore::Open hashed any plaintext from older versions
  j->join_token = rec.join_token;
  // shardctl status shows the last stall's account again before the next one.
  if (!rec.stall.empty()) j->health.stall.ParseFromString(rec.stall);
  j->created_ms = rec.created_ms;
  j->updated_ms = rec.updated_ms;
  j->seq = rec.seq;
  j->ckpt.Restore(rec.memory_dir, rec.memory_tier_removed);
  return j;
}

void JobRecovery::KeepUnparsable(std::unique_ptr<Job> j, const Status& why) {
  // Keep the record, but it can never run again.
  j->config.name = j->name;
  j->ckpt.Init(j->config.checkpoint.keep_last, j->config.checkpoint.memory.keep_last);
  Job& bad = table_->Insert(std::move(j));
  if (IsActive(bad) && !opts_.read_only)
    table_->SetState(bad, v1::FAILED, "failed", "stored job spec no longer parses: " + why.ToString());
}

Status JobRecovery::Resume(Job& ref, int64_t now) {
  if (IsActive(ref)) ReconcileCommits(ref);
  if (!ref.launcher && !IsExternal(ref)) {
    if (IsActive(ref))
      table_->SetState(ref, v1::FAILED, "failed",
                       std::string("this coordinator has no '") + shard::LauncherName(ref.config.resources.launcher) +
                           "' launcher any more, so the job's workers can be neither watched nor restarted");
    return shard::OkStatus();
  }
  if (ref.state == v1::LAUNCHING || ref.state == v1::RUNNING) return Adopt(ref, now);
  if (ref.launcher && ref.attempt > 0 && (ref.state == v1::RESTARTING || now - ref.updated_ms < 10 * 60 * 1000)) {
    // The coordinator may have died while this attempt's processes were
    // being stopped: watch them again and finish the job (SIGKILL now).
    ASSIGN_OR_RETURN(std::vector<WorkerRecord> workers, table_->store()->LoadWorkers(ref.id, ref.attempt));
    std::vector<int> pids;
    for (const WorkerRecord& w : workers) {
      if (w.rank >= static_cast<int>(pids.size())) pids.resize(w.rank + 1, 0);
      pids[w.rank] = w.pid;
    }
    ref.launcher->Adopt(ref.id, ref.attempt, pids);
    ref.draining_attempt = ref.attempt;
    ref.kill_at_ms = now;
    if (ref.state == v1::RESTARTING) ref.next_launch_ms = now;
  } else if (ref.state == v1::RESTARTING) {
    ref.next_launch_ms = now;
  }
  return shard::OkStatus();
}

Status JobRecovery::Adopt(Job& ref, int64_t now) {
  ASSIGN_OR_RETURN(std::vector<WorkerRecord> workers, table_->store()->LoadWorkers(ref.id, ref.attempt));
  // An attempt of an elastic job may run on fewer ranks (elastic_resize.h):
  // as many as registered with the previous coordinator (external), or as
  // its launcher started (elastic_launched.h: one record per rank launched).
  int world = ref.config.parallel.world_size;
  if (shard::ElasticEnabled(ref.config) && (!IsExternal(ref) || ref.state == v1::RUNNING)) {
    int seen = 0;
    for (const WorkerRecord& w : workers) seen = std::max(seen, w.rank + 1);
    if (seen > 0 && seen < world && shard::WhyNotWorldSize(ref.config, seen).empty()) world = ref.elastic.next_world = seen;
  }
  ref.ranks.assign(world, JobRank{});
  std::vector<int> pids(ref.ranks.size(), 0);
  for (const WorkerRecord& w : workers) {
    if (w.rank < 0 || w.rank >= static_cast<int>(ref.ranks.size())) continue;
    JobRank& r = ref.ranks[w.rank];
    r.pid = w.pid;
    r.hostname = w.hostname;
    r.state = "adopting";
    r.registered = true;  // it registered with the previous coordinator
    pids[w.rank] = w.pid;
  }
  for (JobRank& r : ref.ranks) {
    // Launched ranks had registered or were about to; external ones that
    // never joined keep waiting for their user's launcher.
    if (!IsExternal(ref)) r.registered = true;
    r.launched_ms = r.last_heartbeat_ms = r.last_progress_ms = now;
    r.step = ref.progress.step();
  }
  ref.adopted = true;
  // Rank 0 sends its resume point with every heartbeat: the event is
  // once per attempt across coordinator restarts too.
  if (auto events = table_->store()->LoadEvents(ref.id, 0); events.ok())
    for (const EventRecord& e : *events)
      if (e.attempt == ref.attempt && e.kind == "resumed") ref.ckpt.MarkResumedEvent(ref.attempt);
  if (ref.launcher) ref.launcher->Adopt(ref.id, ref.attempt, pids);
  table_->Emit(ref, "adopting", "coordinator restarted; waiting for the attempt's workers to heartbeat");
  return shard::OkStatus();
}

void JobRecovery::ReconcileCommits(Job& j) {
  // Reads only manifests and file sizes (no hashing): Recover runs before the
  // coordinator serves anything. Both tiers (checkpoint.memory): the newest
  // whole step of this run newer than the last one recorded.
  const std::string fingerprint = shard::RunFingerprint(shard::RunKeysOf(j.config));
  struct Found {
    shard::Manifest m;
    std::string dir;
    int64_t bytes = 0;
    shard::CheckpointTier tier = shard::CheckpointTier::kDisk;
  };
  std::optional<Found> best;
  for (const auto& [dir, tier] : {std::pair{CheckpointDirOf(j), shard::CheckpointTier::kDisk},
                                  std::pair{MemoryTierDirOf(j), shard::CheckpointTier::kMemory}}) {
    if (dir.empty()) continue;
    auto steps = shard::ListSteps(dir);
    if (!steps.ok()) continue;
    for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
      if (it->step <= j.progress.last_committed_step() || (best && it->step <= best->m.step)) break;
      if (!it->committed) continue;
      auto text = shard::ReadFileToString(it->dir + "/" + shard::kCommittedFile);
      if (!text.ok()) continue;
      auto m = shard::Manifest::FromJson(*text, it->dir + "/" + shard::kCommittedFile);
      if (!m.ok() || m->step != it->step || !shard::IsThisRunsStep(m->run_fingerprint, fingerprint)) continue;
      int64_t bytes = 0;
      bool whole = true;
      for (const auto& f : m->files) {
        std::error_code ec;
        const uint64_t size = std::filesystem::file_size(it->dir + "/" + f.name, ec);
        whole = whole && !ec && size == f.size;
        bytes += static_cast<int64_t>(f.size);
      }
      if (!whole) continue;  // resume skips it too (and falls back)
      best = Found{std::move(*m), it->dir, bytes, tier};
      break;
    }
  }
  if (!best) return;
  const shard::Manifest& m = best->m;
  j.progress.set_last_committed_step(m.step);
  if (Status st = table_->store()->PutCheckpoint({j.id, m.step, m.world, static_cast<int>(m.files.size()), best->bytes,
                                                  best->dir, opts_.now_ms(), shard::CheckpointTierName(best->tier)});
      !st.ok())
    table_->NoteStoreFailure(j, "the commit of step " + std::to_string(m.step), st);
  table_->Emit(j, "checkpoint_committed",
               "step " + std::to_string(m.step) + ": " + std::to_string(m.files.size()) + " shard(s), " +
                   internal::Fmt(best->bytes / 1e6, "%.1f") + " MB in " + best->dir +
                   (best->tier == shard::CheckpointTier::kMemory ? " (memory tier)" : "") +
                   " (its COMMITTED was written just before the previous coordinator stopped; recorded at restart)");
}

}  // namespace shardd
