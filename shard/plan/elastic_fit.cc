#include "shard/plan/elastic_fit.h"

#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "shard/spec/elastic_world.h"

namespace shard::plan {

Status CheckFitsAtWorldSize(const JobConfig& job, int world, const HardwareCatalog& catalog,
                            const std::string& cluster_name, const ClusterSpec* probed) {
  ASSIGN_OR_RETURN(JobConfig at, JobAtWorldSize(job, world));
  ASSIGN_OR_RETURN(Plan plan, PlanJob(at, catalog, cluster_name, probed));
  if (plan.ok()) return OkStatus();
  return FailedPrecondition("on " + std::to_string(world) + " of " + std::to_string(job.parallel.world_size) +
                            " ranks the planner says: " + PlanSummary(plan));
}

}  // namespace shard::plan
