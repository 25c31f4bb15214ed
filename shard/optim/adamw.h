// AdamW over (a slice of) one unit's flat buffer. Weight decay is per tensor
// (matrices decay; norms and embeddings do not unless asked), so a slice is cut
// into ranges at tensor boundaries — the pure part, tested alone.
#pragma once

#include <cstdint>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/spec/param_layout.h"
#include "shard/spec/optim_config.h"

namespace shard {

struct DecayRange {
  int64_t begin = 0;  // element offsets relative to the slice start
  int64_t end = 0;
  bool decay = false;
};

// Splits the unit slice [begin, end) into ranges of equal decay; padding past
// the unit's numel is a non-decayed range (its values stay 0: zero grads).
std::vector<DecayRange> DecayRanges(const UnitSpec& unit, int64_t begin, int64_t end,
                                    bool decay_norms_and_embeddings);

// The backend's arguments for one decay range of a step.
AdamWArgs AdamWArgsFor(const OptimConfig& config, bool decay, float lr, int64_t step, float grad_scale);

// One AdamW step on a slice: params/grads/m/v point at the slice start.
void AdamWSlice(Backend* backend, const std::vector<DecayRange>& ranges, const OptimConfig& config,
                float lr, int64_t step, float grad_scale, float* params, const float* grads, float* m, float* v);

}  // namespace shard
