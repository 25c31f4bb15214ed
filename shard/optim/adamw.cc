#include "shard/optim/adamw.h"

#include <algorithm>

namespace shard {

std::vector<DecayRange> DecayRanges(const UnitSpec& unit, int64_t begin, int64_t end,
                                    bool decay_norms_and_embeddings) {
  std::vector<DecayRange> out;
  auto push = [&](int64_t lo, int64_t hi, bool decay) {
    if (lo >= hi) return;
    if (!out.empty() && out.back().decay == decay && out.back().end == lo - begin) {
      out.back().end = hi - begin;
    } else {
      out.push_back({lo - begin, hi - begin, decay});
    }
  };
  for (const auto& t : unit.tensors) {
    int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    push(lo, hi, t.decay || decay_norms_and_embeddings);
  }
  push(std::max(begin, unit.numel), end, false);
  return out;
}

AdamWArgs AdamWArgsFor(const OptimConfig& c, bool decay, float lr, int64_t step, float grad_scale) {
  AdamWArgs a;
  a.lr = lr;
  a.beta1 = static_cast<float>(c.beta1);
  a.beta2 = static_cast<float>(c.beta2);
  a.eps = static_cast<float>(c.eps);
  a.weight_decay = decay ? static_cast<float>(c.weight_decay) : 0.0f;
  a.step = step;
  a.grad_scale = grad_scale;
  return a;
}

void AdamWSlice(Backend* backend, const std::vector<DecayRange>& ranges, const OptimConfig& c, float lr,
                int64_t step, float grad_scale, float* params, const float* grads, float* m, float* v) {
  for (const auto& r : ranges)
    backend->AdamW(params + r.begin, grads + r.begin, m + r.begin, v + r.begin, r.end - r.begin,
                   AdamWArgsFor(c, r.decay, lr, step, grad_scale));
}

}  // namespace shard
