// The memory simulator beside the planner: what `shardctl plan --simulate`
// prints, and what the planner's tests compare.
//
// Per rank, the planner's estimate is its device total, and its host total
// over the ranks of a node (with a checkpoint writer's snapshot, as rank 0
// is one); its "allocations" figures leave out the stated
// allowances the simulator cannot see (MemoryEstimate::device_allowance,
// host_allowance) — those are what the simulated peaks are compared with.
#pragma once

#include <cstdint>
#include <string>

#include "shard/plan/planner.h"
#include "shard/sim/memory_sim.h"
#include "shard/spec/job_config.h"

namespace shard::sim {

struct SimComparison {
  SimulationResult simulated;
  int64_t estimate_device = 0;        // per rank, allowances included
  int64_t estimate_host = 0;          // per rank (the node's total over its ranks)
  int64_t estimate_device_alloc = 0;  // per rank, allowances left out
  int64_t estimate_host_alloc = 0;
  // simulated / estimate_*_alloc - 1 (0.02 = the simulation found 2% more).
  double device_drift() const;
  double host_drift() const;
};

// Simulates the job as `plan` resolved it (precision, GPU). Refuses plans the
// simulator does not model: the CPU engine (measured directly instead, see
// tests/bench/host_memory_bench).
StatusOr<SimComparison> SimulatePlannedJob(const JobConfig& job, const plan::Plan& plan);

std::string FormatSimulationText(const SimComparison& c);
// PlanToJson's object with "simulated" and "estimate" added (integer bytes).
std::string PlanWithSimulationJson(const plan::Plan& plan, const SimComparison& c);

}  // namespace shard::sim
