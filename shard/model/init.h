// Deterministic parameter initialisation as a pure function of (seed, unit,
// element index), so any rank can initialise exactly its own slice of a unit
// and the result does not depend on the world size.
//
// HF Llama's scheme: linear and embedding weights ~ N(0, initializer_range =
// 0.02), norm weights = 1.
#pragma once

#include <cstdint>

#include "shard/spec/param_layout.h"

namespace shard {

// Fills out[0, end-begin) with elements [begin, end) of unit `unit_index`'s
// flat buffer (elements past the unit's size, i.e. FSDP padding, get 0).
void InitUnitParams(const UnitSpec& unit, int unit_index, uint64_t seed, float std_dev, int64_t begin,
                    int64_t end, float* out);

}  // namespace shard
