// The job file's precision keys resolved (DESIGN.md "Precision"):
// train.precision bf16|fp16 keeps fp32 master weights and Adam moments,
// all-gathers two-byte weights and rounds GEMM inputs to that type; fp32 stays
// fp32 throughout (auto is resolved per device first). parallel.reduce_dtype
// picks the gradient reduce-scatter's wire type. The engine applies the plan
// to its FSDP options (shard/train/precision.h); the planner prices it. Pure;
// thread-safe.
#pragma once

#include <string>

#include "shard/common/status.h"
#include "shard/spec/job_config.h"
#include "shard/tensor/dtype.h"

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

}  // namespace shard
