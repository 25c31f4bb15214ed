// The memory simulator: the real trainer — model construction, the FSDP
// runtime and its shards, the optimizer state (on the device or offloaded),
// the weight-loading buffer, two training steps with every micro-batch's
// forward/backward schedule and the AdamW step, and a checkpoint snapshot in
// between when the job checkpoints — run at a job's true shapes and world
// size on a backend that keeps the books of every device and host allocation
// but holds no data and does no math (shard/backend/sim), with a
// communicator that moves nothing (shard/comm/sim).
//
// One rank is simulated: every rank of a job holds shards of equal (padded)
// size and runs the same schedule, so rank 0 stands for all of them — and it
// is the one that also writes a checkpoint shard (a writer). Its peaks are the
// per-rank peaks. A 70B job simulates in seconds with a few MiB of real memory:
// simulated buffers are addresses that are never backed.
//
// What it cannot see (the planner states them as allowances): the CUDA
// context, cuBLASLt workspace and NCCL buffers, the caching allocator's
// fragmentation, and the worker process's own host footprint.
//
// Thread-safety: one call at a time per process is not required; each call
// builds its own trainer.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "shard/common/status.h"
#include "shard/spec/job_config.h"

namespace shard::sim {

struct SimulationOptions {
  // train.precision as the planner resolved it (auto is not accepted here).
  Precision precision = Precision::kBf16;
  // Whether the simulated GPU computes in bf16 (the catalog's bf16 support).
  bool native_bf16 = true;
};

struct SimulatedPeak {
  int64_t bytes = 0;
  std::string where;  // "step 1, micro-batch 2, backward block 79 (after AttentionBackward)"
  std::map<int64_t, int> live;  // the buffers live then: bytes -> count
};

struct SimulationResult {
  int world = 1;
  int rank = 0;           // the rank simulated (see above)
  SimulatedPeak device;   // per rank
  SimulatedPeak host;     // per rank
  int64_t device_after_load = 0;  // persistent state: shards, optimizer, model buffers
  int64_t host_after_load = 0;
  int micro_batches = 0;  // per rank per step
  double seconds = 0;     // wall time of the simulation
};

StatusOr<SimulationResult> SimulateJobMemory(const JobConfig& job, const SimulationOptions& options);

}  // namespace shard::sim
