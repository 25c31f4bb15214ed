// Low-memory optimizer state (optim.state_dtype: bf16): the master weights
// and AdamW moments held as bf16, 2 bytes each, updated with stochastic
// rounding so that small updates are not lost to round-to-nearest.
//
// Why stochastic rounding: an AdamW step changes a weight by ~lr, often far
// below half a bf16 ulp of the weight (2^-8 relative), so round-to-nearest
// writes the old weight back and training stalls. Rounding up with
// probability (x - down) / (up - down) keeps each write unbiased, E[SR(x)] = x,
// which Zamirai, Zhang, Aberger and De Sa ("Revisiting BFloat16 Training",
// arXiv:2010.06192, 2020) show recovers fp32 accuracy with pure-bf16 weights
// and optimizer state (Kahan summation is their other fix; it needs another
// 2 B/param).
//
// The random bits are a counter-based hash of (seed, step, unit, which tensor,
// element index in the unit's flat buffer): no generator state to checkpoint,
// a resumed run draws what the uninterrupted one drew, and the draw does not
// depend on the world size or on which thread or backend computes it. The
// arithmetic runs on the host (the state is offloaded), so CPU and CUDA jobs
// update bitwise alike. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/optim/adamw.h"
#include "shard/spec/optim_config.h"
#include "shard/tensor/dtype.h"

namespace shard {

// splitmix64's finaliser.
inline uint64_t SrMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The stream of one tensor's update: which = 0 master, 1 m, 2 v.
inline uint64_t SrStreamKey(uint64_t seed, int64_t step, int unit, int which) {
  uint64_t k = SrMix64(seed + 0x9e3779b97f4a7c15ull);
  k = SrMix64(k ^ (static_cast<uint64_t>(step) * 0xd1b54a32d192ed03ull));
  return SrMix64(k + (static_cast<uint64_t>(unit) << 2) + static_cast<uint64_t>(which));
}

// 16 random bits for element `index` of a stream.
inline uint32_t SrBits(uint64_t key, int64_t index) {
  return static_cast<uint32_t>(SrMix64(key + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(index) + 1)) >> 48);
}

// fp32 -> bf16 rounding up (in magnitude) with probability equal to the
// dropped fraction of an ulp, given 16 uniform bits. Values bf16 holds exactly
// stay exact; inf and NaN round as F32ToBF16 does. (A value within an ulp of
// the largest finite bf16 may round up to inf, as stochastic rounding does.)
inline uint16_t F32ToBF16Stochastic(float f, uint32_t bits16) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) >= 0x7f800000u) return F32ToBF16(f);
  return static_cast<uint16_t>((x + (bits16 & 0xffffu)) >> 16);
}

// Where a slice's random draws come from: the job's seed, the unit, and the
// slice's first element in the unit's flat buffer (global, world-size free).
struct SrSlice {
  uint64_t seed = 0;
  int unit = 0;
  int64_t first = 0;
};

// One AdamW step over n elements with bf16 master/m/v and fp32 gradients:
// widened to fp32, the CPU backend's AdamW arithmetic (AdamWUpdate in
// shard/backend/adamw_math.h, torch's),
// then written back with stochastic rounding (streams of a.step).
void AdamWBf16(uint16_t* param, const float* grad, uint16_t* m, uint16_t* v, int64_t n, const AdamWArgs& a,
               const SrSlice& where);

// AdamWSlice for bf16 state: `where.first` is the slice start's element.
void AdamWSliceBf16(const std::vector<DecayRange>& ranges, const OptimConfig& config, float lr, int64_t step,
                    float grad_scale, const SrSlice& where, uint16_t* params, const float* grads, uint16_t* m,
                    uint16_t* v);

}  // namespace shard
