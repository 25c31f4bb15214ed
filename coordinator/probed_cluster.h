// The GPUs on this host, as the planner's cluster: the hardware probe
// (shard/backend/hardware_probe.h) mapped onto the catalog. Used by the
// coordinator at submission and by `shardctl plan` when no cluster is named,
// so a plan describes the GPUs that will actually run the job.
#pragma once

#include <optional>
#include <string>

#include "shard/plan/hardware.h"

namespace shardd {

// Probes once per process (the CUDA runtime's start-up is not free) and
// returns the cluster, or nullopt with *why set (no GPU, a build without
// CUDA, a GPU the catalog does not know).
std::optional<shard::plan::ClusterSpec> ProbedLocalCluster(const shard::plan::HardwareCatalog& catalog,
                                                           std::string* why);

}  // namespace shardd
