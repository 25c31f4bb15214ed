#include "shard/train/precision.h"

namespace shard {

void ApplyPrecision(const PrecisionPlan& plan, FsdpOptions* options) {
  options->param_dtype = plan.param_dtype;
  options->reduce_dtype = plan.reduce_dtype;
  // The model computes with param_dtype GEMM inputs (trainer.cc sets
  // matmul_dtype to it), so the compute copy can stay in that type.
  options->two_byte_compute_copy = plan.param_dtype != DType::kF32;
}

}  // namespace shard
