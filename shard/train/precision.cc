#include "shard/train/precision.h"

namespace shard {

StatusOr<PrecisionPlan> PlanPrecision(const TrainConfig& train, const ParallelConfig& parallel) {
  PrecisionPlan plan;
  const std::string& p = train.precision;
  if (p == "bf16") {
    plan.param_dtype = DType::kBF16;
  } else if (p == "fp16") {
    plan.param_dtype = DType::kF16;
  } else if (p != "auto" && p != "fp32") {
    return InvalidArgument("train.precision '" + p + "' is not one of: auto, fp32, bf16, fp16");
  }
  auto reduce = ParseDType(parallel.reduce_dtype);
  if (!reduce.ok()) return InvalidArgument("parallel.reduce_dtype: " + reduce.status().message());
  plan.reduce_dtype = *reduce;
  if (plan.param_dtype == DType::kF16 || plan.reduce_dtype == DType::kF16) {
    // Weights past 65504 become inf in fp16, and fp16 gradients below ~6e-8
    // flush to zero without a loss scale.
    plan.warning =
        "fp16 (train.precision or parallel.reduce_dtype) runs without loss scaling: train.loss_scale "
        "arrives separately; prefer bf16 unless the hardware lacks it";
  }
  return plan;
}

void ApplyPrecision(const PrecisionPlan& plan, FsdpOptions* options) {
  options->param_dtype = plan.param_dtype;
  options->reduce_dtype = plan.reduce_dtype;
}

}  // namespace shard
