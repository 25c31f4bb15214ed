// The scheduler glue (job_scheduler.h): placements held and released, the
// queue's decisions announced, placements restored after a restart.
#include "coordinator/jobs/job_scheduler.h"

#include <algorithm>
#include <cstdlib>

#include "coordinator/sched/host_capacity.h"
#include "coordinator/sched/job_queue.h"
#include "shard/common/logging.h"

namespace shardd {

JobScheduler::JobScheduler(const JobManagerOptions& opts, JobTable* table) : opts_(opts), table_(table) {
  if (opts_.local_capacity) alloc_ = std::make_unique<sched::HostAllocator>(*opts_.local_capacity);
}

StatusOr<std::optional<sched::Demand>> JobScheduler::DemandFor(const shard::JobConfig& config, int64_t host_bytes,
                                                               const std::string& src) const {
  std::optional<sched::Demand> demand;
  if (!opts_.local_capacity) return demand;
  demand = sched::DemandOf(config, *opts_.local_capacity, host_bytes);
  if (demand)
    if (Status st = sched::HostAllocator(*opts_.local_capacity).CheckEverFits(*demand); !st.ok())
      return Status(st.code(), src + ": can never run on this host: " + st.message());
  return demand;
}

void JobScheduler::StoreResources(const Job& j) {
  if (!j.placement.demand) return;
  const sched::Placement* p = alloc_ ? alloc_->HeldBy(j.id) : nullptr;
  Status st = table_->store()->PutResources({j.id, j.placement.demand->Encode(), p ? p->Encode() : ""});
  if (!st.ok()) LOG_ERROR("job {}: cannot store its placement: {}", j.id, st.ToString());
}

void JobScheduler::Schedule(int64_t now) {
  if (!alloc_) return;
  std::vector<sched::QueueEntry> waiting;
  for (auto& [id, jp] : table_->jobs()) {
    Job& j = *jp;
    j.placement.queue_position = 0;
    if (!j.placement.demand) continue;
    if (j.placement.placed && !IsActive(j) && j.draining_attempt == 0) {
      alloc_->Release(j.id);
      j.placement.placed = false;
      StoreResources(j);
      continue;
    }
    if (j.placement.placed || (j.state != v1::QUEUED && j.state != v1::RESTARTING)) continue;
    sched::QueueEntry e;
    e.job_id = j.id;
    e.priority = j.config.priority;
    e.enqueued_ms = j.created_ms;
    e.number = std::atoll(j.id.substr(j.id.rfind('-') + 1).c_str());
    e.demand = *j.placement.demand;
    waiting.push_back(std::move(e));
  }
  if (waiting.empty()) return;
  sched::QueueOptions qo;
  qo.starvation_ms = opts_.starvation_ms;
  const sched::QueueDecision d = sched::DecideQueue(std::move(waiting), *alloc_, now, qo);
  for (const auto& [id, placement] : d.start) {
    Job& j = *table_->jobs().at(id);
    if (Status st = alloc_->Hold(id, placement); !st.ok()) LOG_ERROR("{}", st.ToString());
    j.placement.placed = true;
    j.placement.reason.clear();
    StoreResources(j);
    table_->Emit(j, "placed", placement.Describe());
  }
  int position = 0;
  for (const std::string& id : d.order) {
    auto why = d.waiting.find(id);
    if (why == d.waiting.end()) continue;
    Job& j = *table_->jobs().at(id);
    j.placement.queue_position = ++position;
    if (why->second == j.placement.reason) continue;
    j.placement.reason = why->second;
    // A queued job's reason is what `status` and `list` show; a restarting
    // one keeps its restart reason and hears the wait as an event.
    if (j.state == v1::QUEUED) table_->SetState(j, v1::QUEUED, "queued", why->second);
    else table_->Emit(j, "queued", why->second);
  }
}

void JobScheduler::AddPlacementEnv(const Job& j, LaunchRequest* req) const {
  const sched::Placement* p = alloc_ && j.placement.placed ? alloc_->HeldBy(j.id) : nullptr;
  if (!p || !j.placement.demand) return;
  for (const auto& [k, v] : sched::PlacementEnv(*p, *j.placement.demand, j.config.parallel.world_size)) req->env[k] = v;
}

Status JobScheduler::RestorePlacements() {
  if (!alloc_) return shard::OkStatus();
  ASSIGN_OR_RETURN(std::vector<ResourceRecord> records, table_->store()->LoadResources());
  std::map<std::string, const ResourceRecord*> by_job;
  for (const ResourceRecord& r : records) by_job[r.job_id] = &r;
  for (auto& [id, jp] : table_->jobs()) {
    Job& j = *jp;
    auto rec = by_job.find(id);
    if (rec != by_job.end()) {
      auto d = sched::Demand::Decode(rec->second->demand);
      if (d.ok()) j.placement.demand = *d;
      else LOG_ERROR("job {}: stored demand: {}", id, d.status().ToString());
    }
    if (!j.placement.demand && IsActive(j)) {
      // A job stored before scheduling existed: its demand from its spec
      // (the plan's memory is not known here, so memory is not counted).
      j.placement.demand = sched::DemandOf(j.config, alloc_->capacity(), 0);
      if (j.placement.demand) StoreResources(j);
    }
    if (!j.placement.demand || rec == by_job.end() || rec->second->placement.empty()) continue;
    // Still running, restarting, or an ended attempt still draining: its
    // processes (or the next attempt's) sit on these devices.
    if (!IsActive(j) && j.draining_attempt == 0) {
      StoreResources(j);  // released: its processes are gone
      continue;
    }
    auto p = sched::Placement::Decode(rec->second->placement);
    if (!p.ok()) {
      LOG_ERROR("job {}: stored placement: {}", id, p.status().ToString());
      continue;
    }
    if (Status st = alloc_->Hold(id, *p); !st.ok()) LOG_ERROR("restoring placements: {}", st.ToString());
    j.placement.placed = true;
    LOG_INFO("job {}: keeps its placement {}", id, p->Describe());
  }
  return shard::OkStatus();
}

}  // namespace shardd
