#include "shard/optim/bf16_state.h"

#include <algorithm>
#include <future>
#include <system_error>
#include <thread>

#include "shard/backend/adamw_math.h"

namespace shard {
namespace {

void AdamWBf16Range(uint16_t* param, const float* grad, uint16_t* m, uint16_t* v, int64_t b, int64_t e,
                    const AdamWArgs& a, const SrSlice& where) {
  const AdamWFactors f = AdamWFactorsFor(a);  // adamw_math.h: the CPU backend's arithmetic
  const uint64_t kp = SrStreamKey(where.seed, a.step, where.unit, 0);
  const uint64_t km = SrStreamKey(where.seed, a.step, where.unit, 1);
  const uint64_t kv = SrStreamKey(where.seed, a.step, where.unit, 2);
  for (int64_t i = b; i < e; ++i) {
    const int64_t idx = where.first + i;
    const AdamWElement r = AdamWUpdate(BF16ToF32(param[i]), grad[i], BF16ToF32(m[i]), BF16ToF32(v[i]), f);
    m[i] = F32ToBF16Stochastic(r.m, SrBits(km, idx));
    v[i] = F32ToBF16Stochastic(r.v, SrBits(kv, idx));
    param[i] = F32ToBF16Stochastic(r.param, SrBits(kp, idx));
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
    const AdamWArgs a = AdamWArgsFor(c, r.decay, lr, step, grad_scale);
    SrSlice at = where;
    at.first = where.first + r.begin;
    AdamWBf16(params + r.begin, grads + r.begin, m + r.begin, v + r.begin, r.end - r.begin, a, at);
  }
}

}  // namespace shard
