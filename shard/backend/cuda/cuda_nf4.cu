// NF4 dequantisation on the device (Backend::DequantizeNf4: QLoRA's gathered
// frozen base). One thread per code byte: it reads the byte and its block's
// scale (absmax, or the double-quantised int8 * group scale + mean) and
// writes two outputs, rounded to the compute dtype with the same
// round-to-nearest-even as the cast kernels: widened back to fp32, or stored
// as two-byte values (a two-byte compute copy). The codebook sits in constant
// memory (all threads of a warp read nearby entries: broadcast).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "shard/backend/cuda/cuda_kernels.h"

namespace shard::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kDoubleQuantBlock = 256;  // shard/tensor/nf4.h kNf4DoubleQuantBlock

__constant__ float kCodebook[16] = {
    -1.0f,  -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f};

__device__ inline float Round(float v, int round_to) {
  if (round_to == 1) return __bfloat162float(__float2bfloat16_rn(v));
  if (round_to == 2) return __half2float(__float2half_rn(v));
  return v;
}

__device__ inline void Store(float v, int round_to, float* out) { *out = Round(v, round_to); }
__device__ inline void Store(float v, int, __nv_bfloat16* out) { *out = __float2bfloat16_rn(v); }
__device__ inline void Store(float v, int, __half* out) { *out = __float2half_rn(v); }

template <typename T>
__global__ void DequantNf4Kernel(const uint8_t* codes, const float* absmax, const int8_t* absmax_q,
                                 const float* absmax_scale, const float* absmax_mean, int64_t bytes,
                                 int block_size, int round_to, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = 2 * i / block_size;
    const float s = absmax ? absmax[b]
                           : static_cast<float>(absmax_q[b]) * absmax_scale[b / kDoubleQuantBlock] + *absmax_mean;
    const uint8_t c = codes[i];
    Store(kCodebook[c >> 4] * s, round_to, out + 2 * i);
    Store(kCodebook[c & 15] * s, round_to, out + 2 * i + 1);
  }
}

}  // namespace

void LaunchDequantizeNf4(const Nf4Run& run, void* out, DType round_to, DType out_dtype, Stream s) {
  if (run.numel <= 0) return;
  const int64_t bytes = run.numel / 2;
  int64_t grid = (bytes + kThreads - 1) / kThreads;
  grid = grid < 1 ? 1 : (grid > (1 << 16) ? (1 << 16) : grid);
  const auto g = static_cast<unsigned>(grid);
  const auto st = static_cast<cudaStream_t>(s);
  const int r = static_cast<int>(round_to);
  switch (out_dtype) {
    case DType::kBF16:
      DequantNf4Kernel<<<g, kThreads, 0, st>>>(run.codes, run.absmax, run.absmax_q, run.absmax_scale,
                                               run.absmax_mean, bytes, run.block_size, r,
                                               static_cast<__nv_bfloat16*>(out));
      break;
    case DType::kF16:
      DequantNf4Kernel<<<g, kThreads, 0, st>>>(run.codes, run.absmax, run.absmax_q, run.absmax_scale,
                                               run.absmax_mean, bytes, run.block_size, r, static_cast<__half*>(out));
      break;
    default:
      DequantNf4Kernel<<<g, kThreads, 0, st>>>(run.codes, run.absmax, run.absmax_q, run.absmax_scale,
                                               run.absmax_mean, bytes, run.block_size, r, static_cast<float*>(out));
  }
  CheckLaunch("DequantizeNf4");
}

}  // namespace shard::cuda
