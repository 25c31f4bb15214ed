// Cross-entropy over [rows, vocab] logits with the softmax gradient written in
// place (cpu/cpu_cross_entropy.cc's op); the row losses summed in one ordered pass.
#include <cmath>

#include "shard/backend/cuda/cuda_kernel_util.cuh"

namespace shard::cuda {
namespace {

// One block per row: an online max/sum pass over the vocabulary in thread
// strides (the row is read twice in all, and nothing beside the logits is
// allocated), then the gradient written in place.
constexpr int kCeThreads = 512;
__global__ void CrossEntropyKernel(float* logits, const int32_t* targets, int vocab, float grad_scale, bool grad,
                                   double* row_loss, int64_t* bad_target) {
  const int64_t r = blockIdx.x;
  float* x = logits + r * static_cast<int64_t>(vocab);
  const int32_t t = targets[r];
  if (t < 0 || t >= vocab) {
    if (t >= vocab && threadIdx.x == 0) atomicCAS(reinterpret_cast<unsigned long long*>(bad_target), 0ull,
                                                  static_cast<unsigned long long>(r + 1));
    if (grad)
      for (int j = threadIdx.x; j < vocab; j += blockDim.x) x[j] = 0.0f;
    if (threadIdx.x == 0) row_loss[r] = 0.0;
    return;
  }
  float m = -INFINITY, s = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = x[j];
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  // Combine (m, s) pairs: first the block max, then sums rescaled to it.
  __shared__ float red[kCeThreads / 32];
  __shared__ float block_max;
  float mm = m;
  for (int o = 16; o > 0; o >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mm;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = red[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) b = fmaxf(b, red[w]);
    block_max = b;
  }
  __syncthreads();
  const float mx = block_max;
  const double part = m == -INFINITY ? 0.0 : static_cast<double>(s) * exp(static_cast<double>(m) - mx);
  const double sum = BlockSum(part);
  if (threadIdx.x == 0) row_loss[r] = log(sum) + (static_cast<double>(mx) - x[t]);
  if (!grad) return;
  __syncthreads();  // x[t] is read above before it is overwritten below
  const float scale = static_cast<float>(grad_scale / sum);
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    float v = expf(x[j] - mx) * scale;
    if (j == t) v -= grad_scale;
    x[j] = v;
  }
}

}  // namespace

void LaunchCrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab, float grad_scale,
                        bool grad, double* row_loss, double* result, int64_t* bad_target, Stream s) {
  cudaMemsetAsync(bad_target, 0, sizeof(int64_t), S(s));
  CrossEntropyKernel<<<static_cast<unsigned>(rows), kCeThreads, 0, S(s)>>>(logits, targets, vocab, grad_scale, grad,
                                                                           row_loss, bad_target);
  OrderedSum<<<1, 1024, 0, S(s)>>>(row_loss, rows, result);
  CheckLaunch("CrossEntropy");
}
}  // namespace shard::cuda
