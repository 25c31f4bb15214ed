// A LoRA base's identity is its weights (the adapters are only valid on the
// values they were trained against), hashed as each rank streams its own
// shard at load — no rank ever reads the whole model for it.
//
// The hash is a sum, mod 2^64, of one mixed term per element keyed by its
// place in the model (unit, index in the unit's flat buffer) and its fp32
// bits. A sum does not care how the elements are cut into slices, so the
// figure is the same at every world size and strategy (a checkpoint resumes
// on another world), and each rank's partial sum combines with the others'
// through one all-reduce. The bits are the fp32 values the model computes
// with, so a bf16 base re-saved as fp32 is the same base; a re-serialised
// file (tensors in another order, other byte offsets) is too.
//
// Partial sums travel as four 16-bit limbs in doubles: summed over up to
// 2^37 ranks they stay exact integers, and FoldHashLimbs carries them back
// into 64 bits. Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>

namespace shard {

// The sum of the terms of elements [first, first + n) of unit `unit`, v[0..n).
uint64_t WeightsSliceHash(int unit, int64_t first, const float* v, int64_t n);

std::array<double, 4> HashToLimbs(uint64_t h);
uint64_t FoldHashLimbs(const std::array<double, 4>& limb_sums);

}  // namespace shard
