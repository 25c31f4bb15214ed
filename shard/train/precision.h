// Applies the job's precision plan (shard/spec/precision.h) to the FSDP
// runtime's mixed-precision options. Pure; thread-safe.
#pragma once

#include "shard/fsdp/fsdp_runtime.h"
#include "shard/spec/precision.h"

namespace shard {

// Copies the plan into FSDP options.
void ApplyPrecision(const PrecisionPlan& plan, FsdpOptions* options);

}  // namespace shard
