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
// Other values pass through. The one place this rule is written: the engine
// resolves with its backend, the planner with the cluster it plans for.
Precision ResolveAutoPrecision(Precision precision, bool gpu, bool native_bf16);

// The compute type of a resolved precision (auto counts as fp32).
DType PrecisionDType(Precision resolved);

// The FSDP runtime's types for a resolved precision, and the warning fp16
// without loss scaling deserves.
PrecisionPlan PlanPrecision(Precision resolved, const TrainConfig& train, const ParallelConfig& parallel);

}  // namespace shard
