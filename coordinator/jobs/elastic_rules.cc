// What both sides of elastic restarts share (elastic_rules.h).
#include "coordinator/jobs/elastic_rules.h"

#include <algorithm>

#include "coordinator/sched/host_capacity.h"

namespace shardd::elastic {
namespace {

bool AllRegistered(const Job& j) {
  return std::all_of(j.ranks.begin(), j.ranks.end(), [](const JobRank& r) { return r.registered; });
}

}  // namespace

int64_t WaitMs(const Job& j) { return static_cast<int64_t>(j.config.restart.elastic_wait_s * 1000); }

bool Launched(const Job& j) { return j.launcher != nullptr && !IsExternal(j) && shard::ElasticEnabled(j.config); }

bool ShrinkDue(const Job& j, int64_t now) {
  return j.state == v1::LAUNCHING && j.attempt >= 2 && !AllRegistered(j) && now - j.attempt_began_ms >= WaitMs(j);
}

bool Shrunk(const Job& j) {
  return (j.state == v1::RUNNING || j.state == v1::LAUNCHING) &&
         static_cast<int>(j.ranks.size()) < j.config.parallel.world_size;
}

bool WantsCapacity(const Job& j, int64_t now) { return Launched(j) && (ShrinkDue(j, now) || Shrunk(j)); }

LaunchRequest CapacityRequest(const Job& j, const sched::HostAllocator* alloc) {
  LaunchRequest req;
  req.job_id = j.id;
  req.attempt = j.attempt;
  req.world = j.config.parallel.world_size;
  req.job_name = j.config.name;
  req.resources = j.config.resources;
  if (const sched::Placement* p = alloc && j.placement.placed && j.placement.demand ? alloc->HeldBy(j.id) : nullptr)
    for (const auto& [k, v] : sched::PlacementEnv(*p, *j.placement.demand, j.config.parallel.world_size)) req.env[k] = v;
  return req;
}

std::string MicroBatchChange(const Job& j, int from, int to) {
  return "micro-batches per step " + std::to_string(shard::MicroBatchesPerStep(j.config, from)) + " → " +
         std::to_string(shard::MicroBatchesPerStep(j.config, to)) + " (global batch " +
         std::to_string(j.config.train.global_batch) + " kept)";
}

shard::ElasticDecision DecideFitWorld(const Job& j, int available) {
  shard::ElasticDecision d = shard::DecideElasticWorld(j.config, available);
  if (d.world > 0 && j.elastic.unfit > 0 && d.world <= j.elastic.unfit)
    d = {0, "the planner refused " + std::to_string(j.elastic.unfit) + " rank(s) already"};
  return d;
}

bool RefuseShrinkOnce(Job& j, const std::string& why, int world, JobTable* table) {
  if (j.elastic.refused_attempt == j.attempt) return false;
  j.elastic.refused_attempt = j.attempt;
  table->Emit(j, "elastic_refused",
              "cannot continue on fewer ranks: " + why + "; waiting for all " + std::to_string(world));
  return false;
}

}  // namespace shardd::elastic
