// shardctl plan: will a job fit, how fast will it run, what should change.
// Offline: reads the job file (and model.from_hf's config.json) and the
// hardware catalog, never the data or the weights — --simulate included.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardctl {

struct PlanOptions {
  std::string job_file;
  std::vector<std::string> sets;  // --set key=value overrides
  std::string cluster;            // a cluster of configs/hardware/clusters.yaml ("" = this host's CPU for device cpu/auto)
  bool json = false;
  // Also run the job's trainer for real at its shapes on the memory simulator
  // (shard/sim/memory_sim.h) and print its peaks beside the estimate.
  bool simulate = false;
};

// Prints the plan (a table, or JSON with --json) to stdout. Returns OK when the
// job fits, RESOURCE_EXHAUSTED with the verdict and reasons when it does not
// fit or cannot run (exit 1), INVALID_ARGUMENT/NOT_FOUND for bad input (exit 2).
// *printed: the plan went to stdout (under --json the plan document is then
// stdout's one document, and a does-not-fit error belongs on stderr only).
shard::Status RunPlan(const PlanOptions& o, bool* printed);

}  // namespace shardctl
