#include "shard/train/precision.h"

namespace shard {

void ApplyPrecision(const PrecisionPlan& plan, FsdpOptions* options) {
  options->param_dtype = plan.param_dtype;
  options->reduce_dtype = plan.reduce_dtype;
}

}  // namespace shard
