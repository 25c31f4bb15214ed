#include "shard/optim/bf16_state.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <system_error>
#include <thread>

namespace shard {
namespace {

void AdamWBf16Range(uint16_t* param, const float* grad, uint16_t* m, uint16_t* v, int64_t b, int64_t e,
                    const AdamWArgs& a, const SrSlice& where) {
  // Scalar factors in double, applied in float: cpu::AdamW's arithmetic.
  const double lr = a.lr, b1 = a.beta1, b2 = a.beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(a.step));
  const float decay = static_cast<float>(1.0 - lr * a.weight_decay);
  const float fb1 = a.beta1, fb2 = a.beta2;
  const float one_minus_b1 = static_cast<float>(1.0 - b1), one_minus_b2 = static_cast<float>(1.0 - b2);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = a.eps, gs = a.grad_scale;
  const uint64_t kp = SrStreamKey(where.seed, a.step, where.unit, 0);
  const uint64_t km = SrStreamKey(where.seed, a.step, where.unit, 1);
  const uint64_t kv = SrStreamKey(where.seed, a.step, where.unit, 2);
  for (int64_t i = b; i < e; ++i) {
    const int64_t idx = where.first + i;
    const float g = grad[i] * gs;
    const float p = BF16ToF32(param[i]) * decay;
    const float mi = fb1 * BF16ToF32(m[i]) + one_minus_b1 * g;
    const float vi = fb2 * BF16ToF32(v[i]) + one_minus_b2 * g * g;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    m[i] = F32ToBF16Stochastic(mi, SrBits(km, idx));
    v[i] = F32ToBF16Stochastic(vi, SrBits(kv, idx));
    param[i] = F32ToBF16Stochastic(p - step_size * (mi / denom), SrBits(kp, idx));
  }
}

}  // namespace

void AdamWBf16(uint16_t* param, const float* grad, uint16_t* m, uint16_t* v, int64_t n, const AdamWArgs& a,
               const SrSlice& where) {
  // Each element's draw depends only on its index, so the split into threads
  // changes nothing in the result.
  constexpr int64_t kChunk = 1 << 18;
  const int threads = static_cast<int>(std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()),
                                                         (n + kChunk - 1) / kChunk));
  if (threads <= 1) return AdamWBf16Range(param, grad, m, v, 0, n, a, where);
  std::vector<std::future<void>> parts;
  const int64_t per = (n + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    const int64_t b = t * per, e = std::min(n, b + per);
    try {
      parts.push_back(std::async(std::launch::async, AdamWBf16Range, param, grad, m, v, b, e, a, where));
    } catch (const std::system_error&) {
      AdamWBf16Range(param, grad, m, v, b, e, a, where);  // no thread to be had: same result, serially
    }
  }
  AdamWBf16Range(param, grad, m, v, 0, std::min(n, per), a, where);
  for (auto& f : parts) f.get();
}

void AdamWSliceBf16(const std::vector<DecayRange>& ranges, const OptimConfig& c, float lr, int64_t step,
                    float grad_scale, const SrSlice& where, uint16_t* params, const float* grads, uint16_t* m,
                    uint16_t* v) {
  for (const auto& r : ranges) {
    AdamWArgs a;
    a.lr = lr;
    a.beta1 = static_cast<float>(c.beta1);
    a.beta2 = static_cast<float>(c.beta2);
    a.eps = static_cast<float>(c.eps);
    a.weight_decay = r.decay ? static_cast<float>(c.weight_decay) : 0.0f;
    a.step = step;
    a.grad_scale = grad_scale;
    SrSlice at = where;
    at.first = where.first + r.begin;
    AdamWBf16(params + r.begin, grads + r.begin, m + r.begin, v + r.begin, r.end - r.begin, a, at);
  }
}

}  // namespace shard
