// Internal to shard/backend/cuda: what the kernel files share — the stream
// cast, grid sizing for grid-stride loops, and block reductions of a fixed
// shape and order (the same inputs give the same bits, run after run). Each
// including .cu file gets its own copies (an unnamed namespace: the kernels
// are built without relocatable device code).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "shard/backend/cuda/cuda_kernels.h"

namespace shard::cuda {
namespace {

inline cudaStream_t S(Stream s) { return static_cast<cudaStream_t>(s); }

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements.
inline unsigned GridFor(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > (1 << 16)) b = 1 << 16;
  return static_cast<unsigned>(b);
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__device__ T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it.
template <typename T>
__device__ T BlockSum(T v) {
  __shared__ T warp_part[32];
  __shared__ T total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < static_cast<int>(blockDim.x >> 5) ? warp_part[lane] : T(0);
    w = WarpSum(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  T r = total;
  __syncthreads();  // total and warp_part may be reused by the next call
  return r;
}

// One block of 1024 threads sums `n` doubles in a fixed order.
__global__ void OrderedSum(const double* values, int64_t n, double* result) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += values[i];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) *result = acc;
}

}  // namespace
}  // namespace shard::cuda
