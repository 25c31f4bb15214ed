// AdamW's arithmetic, written once: torch.optim.AdamW's single-tensor path.
// The scalar factors of a step are computed in double, as Python does
// (AdamWFactorsFor), then each element is updated in float (AdamWUpdate).
// Used by the CPU backend (cpu_adamw.cc), the bf16 optimizer state
// (shard/optim/bf16_state.cc, which widens and rounds around it) and the CUDA
// kernel (cuda_adamw.cu, through nvcc: host and device).
//
// Both functions are forced inline: each caller compiles them under its own
// flags (the CPU backend contracts a*b+c into FMAs, -ffp-contract=fast; the
// optimizer library does not), so a shared out-of-line copy would change the
// bits of one of them. Pure; thread-safe.
#pragma once

#include <cmath>
#include <cstdint>

#include "shard/backend/backend.h"

#if defined(__CUDACC__)
#define SHARD_FORCE_INLINE __forceinline__
#else
#define SHARD_FORCE_INLINE [[gnu::always_inline]] inline
#endif

namespace shard {

// One step's scalars, the same for every element of a tensor.
struct AdamWFactors {
  float decay;         // 1 - lr * weight_decay (decoupled decay)
  float beta1, beta2;
  float one_minus_b1, one_minus_b2;
  float step_size;     // lr / (1 - beta1^step)
  float bc2_sqrt;      // sqrt(1 - beta2^step)
  float eps;
  float grad_scale;    // gradients are multiplied by this first
};

// Host only (double arithmetic, std::pow).
SHARD_FORCE_INLINE AdamWFactors AdamWFactorsFor(const AdamWArgs& a) {
  const double lr = a.lr, b1 = a.beta1, b2 = a.beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(a.step));
  AdamWFactors f;
  f.decay = static_cast<float>(1.0 - lr * a.weight_decay);
  f.beta1 = a.beta1;
  f.beta2 = a.beta2;
  f.one_minus_b1 = static_cast<float>(1.0 - b1);
  f.one_minus_b2 = static_cast<float>(1.0 - b2);
  f.step_size = static_cast<float>(lr / bc1);
  f.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  f.eps = a.eps;
  f.grad_scale = a.grad_scale;
  return f;
}

// One element's new parameter and moments, in float.
struct AdamWElement {
  float param, m, v;
};

SHARD_HOST_DEVICE SHARD_FORCE_INLINE AdamWElement AdamWUpdate(float param, float grad, float m, float v,
                                                              const AdamWFactors& f) {
  const float g = grad * f.grad_scale;
  const float p = param * f.decay;
  const float mi = f.beta1 * m + f.one_minus_b1 * g;
  const float vi = f.beta2 * v + f.one_minus_b2 * g * g;
  const float denom = sqrtf(vi) / f.bc2_sqrt + f.eps;
  return {p - f.step_size * (mi / denom), mi, vi};  // addcdiv_(m, denom, -step_size)
}

}  // namespace shard
