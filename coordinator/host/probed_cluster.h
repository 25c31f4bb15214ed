// The GPUs on this host, as the planner's cluster: what `shardd-worker --probe
// --json` reports, mapped onto the catalog. Used by the coordinator at
// submission and by `shardctl plan` when no cluster is named, so a plan
// describes the GPUs that will actually run the job. The probe runs in the
// worker binary, so the daemon itself never loads the CUDA runtime.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shard/plan/hardware.h"

namespace shardd {

// Runs the probe once per process (a CUDA runtime start is not free) and
// returns the cluster, or nullopt with *why set (no GPU, a build without CUDA,
// a worker binary that cannot run, a GPU the catalog does not know).
// How many GPUs the probe saw (0 with *why set when none or it failed): the
// local scheduler's GPU capacity when --gpus is not given.
int ProbedLocalGpuCount(const std::string& worker_bin, std::string* why);

// The GPUs by PCI bus id, in CUDA ordinal order: the probe made once per
// process (fresh = false: the coordinator's start), or a new one (fresh:
// which are still here; the local launcher's elastic restarts).
shard::StatusOr<std::vector<std::string>> ProbedLocalGpuIds(const std::string& worker_bin, bool fresh);

std::optional<shard::plan::ClusterSpec> ProbedLocalCluster(const shard::plan::HardwareCatalog& catalog,
                                                           const std::string& worker_bin, std::string* why);

}  // namespace shardd
