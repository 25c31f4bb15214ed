// fp32 <-> bf16/fp16 casts (mixed precision: gathered weights and reduced
// gradients travel as two bytes). cuda_fp16/cuda_bf16's _rn conversions round
// to nearest even like the CPU backend and shard/tensor/dtype.h, so the same
// inputs give the same bits on both backends (tests/gpu/backend checks it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>

#include "shard/backend/cuda/cuda_kernels.h"

namespace shard::cuda {
namespace {

constexpr int kThreads = 256;
inline cudaStream_t S(Stream s) { return static_cast<cudaStream_t>(s); }
inline unsigned GridFor(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 16) ? (1 << 16) : b));
}
#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void F32ToBF16Kernel(const float* src, __nv_bfloat16* dst, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}
__global__ void F32ToF16Kernel(const float* src, __half* dst, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __float2half_rn(src[i]);
}
__global__ void BF16ToF32Kernel(const __nv_bfloat16* src, float* dst, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __bfloat162float(src[i]);
}
__global__ void F16ToF32Kernel(const __half* src, float* dst, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __half2float(src[i]);
}

__global__ void RoundThroughBF16Kernel(const float* src, float* dst, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __bfloat162float(__float2bfloat16_rn(src[i]));
}
__global__ void RoundThroughF16Kernel(const float* src, float* dst, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __half2float(__float2half_rn(src[i]));
}

}  // namespace

void LaunchCastFromF32(const float* src, void* dst, int64_t n, DType to, Stream s) {
  if (n <= 0) return;
  switch (to) {
    case DType::kF32:
      if (dst != src) cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, S(s));
      break;
    case DType::kBF16:
      F32ToBF16Kernel<<<GridFor(n), kThreads, 0, S(s)>>>(src, static_cast<__nv_bfloat16*>(dst), n);
      break;
    case DType::kF16:
      F32ToF16Kernel<<<GridFor(n), kThreads, 0, S(s)>>>(src, static_cast<__half*>(dst), n);
      break;
  }
  CheckLaunch("CastFromF32");
}

void LaunchCastToF32(const void* src, float* dst, int64_t n, DType from, Stream s) {
  if (n <= 0) return;
  switch (from) {
    case DType::kF32:
      if (dst != src) cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, S(s));
      break;
    case DType::kBF16:
      BF16ToF32Kernel<<<GridFor(n), kThreads, 0, S(s)>>>(static_cast<const __nv_bfloat16*>(src), dst, n);
      break;
    case DType::kF16:
      F16ToF32Kernel<<<GridFor(n), kThreads, 0, S(s)>>>(static_cast<const __half*>(src), dst, n);
      break;
  }
  CheckLaunch("CastToF32");
}

void LaunchRoundThrough(const float* src, float* dst, int64_t n, DType through, Stream s) {
  if (n <= 0) return;
  switch (through) {
    case DType::kF32:
      if (dst != src) cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, S(s));
      break;
    case DType::kBF16:
      RoundThroughBF16Kernel<<<GridFor(n), kThreads, 0, S(s)>>>(src, dst, n);
      break;
    case DType::kF16:
      RoundThroughF16Kernel<<<GridFor(n), kThreads, 0, S(s)>>>(src, dst, n);
      break;
  }
  CheckLaunch("RoundThrough");
}

}  // namespace shard::cuda
