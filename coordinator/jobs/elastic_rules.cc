// What both sides of elastic restarts share (elastic_rules.h).
#include "coordinator/jobs/elastic_rules.h"

namespace shardd::elastic {

std::string MicroBatchChange(const Job& j, int from, int to) {
  return "micro-batches per step " + std::to_string(shard::MicroBatchesPerStep(j.config, from)) + " → " +
         std::to_string(shard::MicroBatchesPerStep(j.config, to)) + " (global batch " +
         std::to_string(j.config.train.global_batch) + " kept)";
}

shard::ElasticDecision DecideFitWorld(const Job& j, int available) {
  shard::ElasticDecision d = shard::DecideElasticWorld(j.config, available);
  if (d.world > 0 && j.elastic_unfit > 0 && d.world <= j.elastic_unfit)
    d = {0, "the planner refused " + std::to_string(j.elastic_unfit) + " rank(s) already"};
  return d;
}

bool RefuseShrinkOnce(Job& j, const std::string& why, int world, JobTable* table) {
  if (j.elastic_refused_attempt == j.attempt) return false;
  j.elastic_refused_attempt = j.attempt;
  table->Emit(j, "elastic_refused",
              "cannot continue on fewer ranks: " + why + "; waiting for all " + std::to_string(world));
  return false;
}

}  // namespace shardd::elastic
