// Maps the job file's precision keys onto the FSDP runtime's mixed-precision
// options (DESIGN.md "Precision"): train.precision bf16|fp16 keeps fp32 master
// weights and Adam moments, all-gathers two-byte weights and computes in fp32
// on them; fp32 stays fp32 throughout (auto is resolved per device first). parallel.reduce_dtype picks the
// gradient reduce-scatter's wire type. Pure; thread-safe.
#pragma once

#include <string>

#include "shard/common/status.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/train/job_config.h"

namespace shard {

struct PrecisionPlan {
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
  // Non-empty when the choice deserves a log warning (fp16 without a loss scaler).
  std::string warning;
};

// train.precision with `auto` resolved for the device (DESIGN.md "Precision"):
// bf16 on a GPU with native bf16 (compute capability >= 8.0), fp16 (and so the
// dynamic loss scaler, train.loss_scale: auto) on older GPUs, fp32 on the CPU.
// Other values pass through.
std::string ResolveAutoPrecision(const std::string& precision, bool gpu, bool native_bf16);

// INVALID_ARGUMENT naming the key for values the job file parser would refuse.
// Expects train.precision already resolved (ResolveAutoPrecision); auto means fp32.
StatusOr<PrecisionPlan> PlanPrecision(const TrainConfig& train, const ParallelConfig& parallel);

// Copies the plan into FSDP options.
void ApplyPrecision(const PrecisionPlan& plan, FsdpOptions* options);

}  // namespace shard
