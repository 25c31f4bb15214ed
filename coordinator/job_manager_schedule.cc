// JobManager's local scheduling: which local jobs hold which GPUs, CPU slots
// and host memory (coordinator/sched), who launches next, and the placement
// restored after a coordinator restart. Everything here runs under mu_; the
// allocator and the queue are pure.
//
// A job is placed before its first launch and keeps its placement through
// its restarts (RESTARTING waits out its backoff on its own devices), until
// it has ended and its last attempt's processes are gone (draining_attempt
// cleared): only then can another job's ranks land on those devices.
#include <algorithm>
#include <cstdlib>

#include "coordinator/job_manager.h"
#include "coordinator/sched/host_capacity.h"
#include "shard/common/logging.h"

namespace shardd {

void JobManager::StoreResourcesLocked(const Job& j) {
  if (!j.demand) return;
  const sched::Placement* p = alloc_ ? alloc_->HeldBy(j.id) : nullptr;
  Status st = store_->PutResources({j.id, j.demand->Encode(), p ? p->Encode() : ""});
  if (!st.ok()) LOG_ERROR("job {}: cannot store its placement: {}", j.id, st.ToString());
}

void JobManager::ScheduleLocked(int64_t now) {
  if (!alloc_) return;
  std::vector<sched::QueueEntry> waiting;
  for (auto& [id, jp] : jobs_) {
    Job& j = *jp;
    j.queue_position = 0;
    if (!j.demand) continue;
    if (j.placed && !Active(j) && j.draining_attempt == 0) {
      alloc_->Release(j.id);
      j.placed = false;
      StoreResourcesLocked(j);
      continue;
    }
    if (j.placed || (j.state != v1::QUEUED && j.state != v1::RESTARTING)) continue;
    sched::QueueEntry e;
    e.job_id = j.id;
    e.priority = j.config.priority;
    e.enqueued_ms = j.created_ms;
    e.number = std::atoll(j.id.substr(j.id.rfind('-') + 1).c_str());
    e.demand = *j.demand;
    waiting.push_back(std::move(e));
  }
  if (waiting.empty()) return;
  sched::QueueOptions qo;
  qo.starvation_ms = opts_.starvation_ms;
  const sched::QueueDecision d = sched::DecideQueue(std::move(waiting), *alloc_, now, qo);
  for (const auto& [id, placement] : d.start) {
    Job& j = *jobs_.at(id);
    if (Status st = alloc_->Hold(id, placement); !st.ok()) LOG_ERROR("{}", st.ToString());
    j.placed = true;
    j.sched_reason.clear();
    StoreResourcesLocked(j);
    EmitLocked(j, "placed", placement.Describe());
  }
  int position = 0;
  for (const std::string& id : d.order) {
    auto why = d.waiting.find(id);
    if (why == d.waiting.end()) continue;
    Job& j = *jobs_.at(id);
    j.queue_position = ++position;
    if (why->second == j.sched_reason) continue;
    j.sched_reason = why->second;
    // A queued job's reason is what `status` and `list` show; a restarting
    // one keeps its restart reason and hears the wait as an event.
    if (j.state == v1::QUEUED) SetStateLocked(j, v1::QUEUED, "queued", why->second);
    else EmitLocked(j, "queued", why->second);
  }
}

void JobManager::AddPlacementEnvLocked(const Job& j, LaunchRequest* req) const {
  const sched::Placement* p = alloc_ && j.placed ? alloc_->HeldBy(j.id) : nullptr;
  if (!p || !j.demand) return;
  for (const auto& [k, v] : sched::PlacementEnv(*p, *j.demand, j.config.parallel.world_size)) req->env[k] = v;
}

Status JobManager::RestorePlacementsLocked() {
  if (!alloc_) return shard::OkStatus();
  ASSIGN_OR_RETURN(std::vector<ResourceRecord> records, store_->LoadResources());
  std::map<std::string, const ResourceRecord*> by_job;
  for (const ResourceRecord& r : records) by_job[r.job_id] = &r;
  for (auto& [id, jp] : jobs_) {
    Job& j = *jp;
    auto rec = by_job.find(id);
    if (rec != by_job.end()) {
      auto d = sched::Demand::Decode(rec->second->demand);
      if (d.ok()) j.demand = *d;
      else LOG_ERROR("job {}: stored demand: {}", id, d.status().ToString());
    }
    if (!j.demand && Active(j)) {
      // A job stored before scheduling existed: its demand from its spec
      // (the plan's memory is not known here, so memory is not counted).
      j.demand = sched::DemandOf(j.config, alloc_->capacity(), 0);
      if (j.demand) StoreResourcesLocked(j);
    }
    if (!j.demand || rec == by_job.end() || rec->second->placement.empty()) continue;
    // Still running, restarting, or an ended attempt still draining: its
    // processes (or the next attempt's) sit on these devices.
    if (!Active(j) && j.draining_attempt == 0) {
      StoreResourcesLocked(j);  // released: its processes are gone
      continue;
    }
    auto p = sched::Placement::Decode(rec->second->placement);
    if (!p.ok()) {
      LOG_ERROR("job {}: stored placement: {}", id, p.status().ToString());
      continue;
    }
    if (Status st = alloc_->Hold(id, *p); !st.ok()) LOG_ERROR("restoring placements: {}", st.ToString());
    j.placed = true;
    LOG_INFO("job {}: keeps its placement {}", id, p->Describe());
  }
  return shard::OkStatus();
}

}  // namespace shardd
