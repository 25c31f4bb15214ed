// What the local launcher may use, found once at coordinator start: the GPUs
// the worker's probe reports (or --gpus), --cpu-slots (default: the core
// count) and the host's physical memory. Also a job's demand, from its spec
// and its plan. Launchers other than local are not counted: their cluster's
// scheduler owns placement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/sched/host_allocator.h"
#include "shard/spec/job_config.h"

namespace shardd::sched {

// --gpus: "0,1,2,3", "0-7", "4-7,9" or "none". Errors name the flag.
StatusOr<std::vector<int>> ParseGpuList(const std::string& text);

struct CapacityOptions {
  std::optional<std::vector<int>> gpus;  // --gpus; nullopt: the probe's count, numbered 0..n-1
  int probed_gpus = 0;                   // what `shardd-worker --probe --json` reported
  int cpu_slots = 0;                     // --cpu-slots; <= 0: the core count
  int64_t host_bytes = -1;               // < 0: this host's physical memory
};
HostCapacity MakeCapacity(const CapacityOptions& opts);

// The job's demand on this host; nullopt when the local launcher does not
// start it (slurm, kubernetes, external). `plan_host_bytes` is the planner's
// memory for the whole job on one host (0 = unknown, not counted).
//   device cpu: one CPU slot per rank;  cuda: one GPU per rank;  cuda:N: GPU N;
//   auto: one GPU per rank when the host has as many, else CPU (as the worker decides).
std::optional<Demand> DemandOf(const shard::JobConfig& job, const HostCapacity& cap, int64_t plan_host_bytes);

// The environment an attempt's ranks get from their placement: which devices
// they see and how many threads they compute with.
std::vector<std::pair<std::string, std::string>> PlacementEnv(const Placement& p, const Demand& d, int world);

}  // namespace shardd::sched
