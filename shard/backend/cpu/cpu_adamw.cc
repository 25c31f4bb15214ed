// AdamW with torch.optim.AdamW's arithmetic (single-tensor path), written once
// in shard/backend/adamw_math.h: scalar factors in double, applied in float.
#include "shard/backend/adamw_math.h"
#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/backend/cpu/cpu_math.h"

namespace shard::cpu {

void AdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& a) {
  const AdamWFactors f = AdamWFactorsFor(a);
  ParallelFor(n, 1 << 14, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const AdamWElement r = AdamWUpdate(param[i], grad[i], m[i], v[i], f);
      m[i] = r.m;
      v[i] = r.v;
      param[i] = r.param;
    }
  });
}

}  // namespace shard::cpu
