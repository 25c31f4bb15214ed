// AdamW (cpu/cpu_adamw.cc's op): the per-element update of
// shard/backend/adamw_math.h, with the factors computed on the host.

#include "shard/backend/cuda/cuda_kernel_util.cuh"

namespace shard::cuda {
namespace {

__global__ void AdamWKernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWFactors f) {
  GRID_STRIDE(i, n) {
    const AdamWElement r = AdamWUpdate(param[i], grad[i], m[i], v[i], f);  // adamw_math.h
    m[i] = r.m;
    v[i] = r.v;
    param[i] = r.param;
  }
}

}  // namespace

void LaunchAdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWFactors& f, Stream s) {
  if (n <= 0) return;
  AdamWKernel<<<GridFor(n), kThreads, 0, S(s)>>>(param, grad, m, v, n, f);
  CheckLaunch("AdamW");
}

}  // namespace shard::cuda
