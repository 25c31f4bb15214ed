#include "shard/spec/precision.h"

#include "shard/spec/loss_scale.h"

namespace shard {

Precision ResolveAutoPrecision(Precision precision, bool gpu, bool native_bf16) {
  if (precision != Precision::kAuto) return precision;
  if (!gpu) return Precision::kFp32;
  return native_bf16 ? Precision::kBf16 : Precision::kFp16;
}

DType PrecisionDType(Precision resolved) {
  switch (resolved) {
    case Precision::kBf16: return DType::kBF16;
    case Precision::kFp16: return DType::kF16;
    case Precision::kAuto:
    case Precision::kFp32: return DType::kF32;
  }
  return DType::kF32;
}

PrecisionPlan PlanPrecision(Precision resolved, const TrainConfig& train, const ParallelConfig& parallel) {
  PrecisionPlan plan;
  plan.param_dtype = PrecisionDType(resolved);
  plan.reduce_dtype = parallel.reduce_dtype;
  if (plan.param_dtype == DType::kF16 || plan.reduce_dtype == DType::kF16) {
    // fp16 gradients below ~6e-8 flush to zero without a loss scale
    // (precision fp16 turns the dynamic scaler on by default; an fp16
    // reduce_dtype alone does not).
    auto scale = ResolveLossScale(train.loss_scale, resolved == Precision::kFp16, train.loss_scale_window);
    if (scale.ok() && scale->mode == LossScaleMode::kOff)
      plan.warning =
          "fp16 (train.precision or parallel.reduce_dtype) runs without loss scaling: small gradients flush to "
          "zero; set train.loss_scale: dynamic, or prefer bf16 unless the hardware lacks it";
  }
  return plan;
}

}  // namespace shard
