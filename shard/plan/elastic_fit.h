// The planner's check before an elastic restart uses a smaller world size
// (shard/spec/elastic_world.h): fewer ranks hold bigger shards, so memory per
// rank grows. The same PlanJob the coordinator runs on submission, at W'.
//
// Thread-safety: a pure function of its arguments (PlanJob reads
// model.from_hf's config.json).
#pragma once

#include <string>

#include "shard/common/status.h"
#include "shard/plan/hardware.h"
#include "shard/spec/job_config.h"

namespace shard::plan {

// OK when `job` fits on `world` of its ranks of the cluster it is planned
// for (`cluster_name` from the catalog, else `probed`, else the local CPU),
// else FAILED_PRECONDITION "on 2 of 8 ranks the planner says: does not fit:
// ..."; INVALID_ARGUMENT when `world` is not one the job allows. A plan that
// cannot be made at all (an unreadable config.json) is returned as its error.
Status CheckFitsAtWorldSize(const JobConfig& job, int world, const HardwareCatalog& catalog,
                            const std::string& cluster_name, const ClusterSpec* probed = nullptr);

}  // namespace shard::plan
