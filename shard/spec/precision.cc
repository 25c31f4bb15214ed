#include "shard/spec/precision.h"

#include "shard/spec/loss_scale.h"

namespace shard {

std::string ResolveAutoPrecision(const std::string& precision, bool gpu, bool native_bf16) {
  if (precision != "auto") return precision;
  if (!gpu) return "fp32";
  return native_bf16 ? "bf16" : "fp16";
}

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
    // fp16 gradients below ~6e-8 flush to zero without a loss scale
    // (precision fp16 turns the dynamic scaler on by default; an fp16
    // reduce_dtype alone does not).
    auto scale = ParseLossScale(train.loss_scale, train.precision, train.loss_scale_window);
    if (scale.ok() && scale->mode == LossScaleMode::kOff)
      plan.warning =
          "fp16 (train.precision or parallel.reduce_dtype) runs without loss scaling: small gradients flush to "
          "zero; set train.loss_scale: dynamic, or prefer bf16 unless the hardware lacks it";
  }
  return plan;
}

}  // namespace shard
