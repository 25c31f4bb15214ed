// AdamW with torch.optim.AdamW's arithmetic (single-tensor path): scalar
// factors are computed in double, as Python does, then applied in float.
#include <cmath>

#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/backend/cpu/cpu_math.h"

namespace shard::cpu {

void AdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& a) {
  const double lr = a.lr, b1 = a.beta1, b2 = a.beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(a.step));
  const float decay = static_cast<float>(1.0 - lr * a.weight_decay);
  const float fb1 = a.beta1, fb2 = a.beta2;
  const float one_minus_b1 = static_cast<float>(1.0 - b1), one_minus_b2 = static_cast<float>(1.0 - b2);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = a.eps, gs = a.grad_scale;
  ParallelFor(n, 1 << 14, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const float g = grad[i] * gs;
      const float p = param[i] * decay;
      const float mi = fb1 * m[i] + one_minus_b1 * g;
      const float vi = fb2 * v[i] + one_minus_b2 * g * g;
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi) / bc2_sqrt + eps;
      param[i] = p - step_size * (mi / denom);  // addcdiv_(m, denom, -step_size)
    }
  });
}

}  // namespace shard::cpu
