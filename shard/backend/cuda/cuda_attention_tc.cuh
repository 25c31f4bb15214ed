// Causal grouped-query flash attention on tensor cores: q, k, v (and, in the
// backward pass, dO, P and dS) are rounded to bf16 or fp16 (AttentionShape::
// compute) for the matrix products; scores, softmax statistics and every
// accumulation stay fp32, and so do all buffers in global memory. Same
// operations, layouts, masking and scratch as the fp32 kernels in
// cuda_attention.cu (read that file first); only the arithmetic differs.
//
// EXPERIMENTAL: compiled for every architecture but not yet run on a GPU (only
// on a CPU emulation of CUDA threads, barriers and wmma fragments, where it
// matched the CPU backend within the GPU test's tolerances). The backend uses
// it only with SHARDD_TC_ATTENTION=1 (cuda_backend.cc), and
// tests/gpu/backend/cuda_attention_test.cc checks it against the CPU backend.
//
// The products use the portable nvcuda::wmma API (16x16x16 fragments, float
// accumulators). Fragments only ever meet memory through load/store_matrix_sync
// on shared memory, so nothing depends on their opaque register layout:
// elementwise work (masking, softmax, rescaling, dS) is plain SIMT code on fp32
// tiles in shared memory. Each warp owns 16 rows of the block's tile (queries
// in the forward and dQ kernels, keys in the dK/dV kernel), so between the
// block-wide tile loads a warp synchronises only with itself.
//   Forward  grid (query tiles, heads, batch). Per key tile: S = Q K^T
//            (wmma, stored fp32), online softmax by two lanes per row, O (fp32
//            in shared memory) rescaled, P stored rounded, O += P V (wmma,
//            accumulating from and into the shared O).
//   Delta    delta = rowsum(round(dO) * O), one warp per row and head.
//   BwdDq    grid (query tiles, heads, batch): S and dP = dO V^T (wmma),
//            dS = P (dP - delta) rounded, dQ += dS K in register fragments.
//   BwdDkDv  grid (key tiles, kv heads, batch): loops over the group's query
//            heads and the query tiles that see its keys; S^T, dP^T (wmma),
//            P^T and dS^T rounded, dV += P^T dO and dK += dS^T Q in register
//            fragments. No atomics anywhere: the backward is deterministic.
// Tiles: head_dim <= 64 uses D = 64, else D = 128 (columns past head_dim are
// zero in shared memory and skipped by the products). Every kernel stays under
// 64 KB of shared memory (the sm_75 opt-in limit), at most ~57 KB.
// bf16 fragments need sm_80: on older architectures the bf16 kernels compile
// to a trap and AttentionTcSupported keeps them from being launched.
//
// Files: this header holds what the kernels share (parameters, tile loads,
// fragment stores, every kernel's shared-memory layout and the tile shapes);
// cuda_attention_tc_fwd.cu the forward kernel, the support check and
// MakeParams; cuda_attention_tc_bwd.cu the delta, dQ and dK/dV kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "shard/backend/cuda/cuda_kernels.h"

namespace shard::cuda::tc {

namespace wmma = nvcuda::wmma;

namespace wmma = nvcuda::wmma;

inline cudaStream_t S(Stream s) { return static_cast<cudaStream_t>(s); }

// Row padding of shared tiles (16 bytes): spreads rows over banks and keeps
// wmma's rules (leading dimension a multiple of 16 bytes, tile pointers
// 32-byte aligned: every tile starts at a multiple of 16 rows and 16 columns).
constexpr int kPadT = 8;  // two-byte elements
constexpr int kPadF = 4;  // floats

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
template <typename T>
constexpr bool kArchHas = !std::is_same<T, __nv_bfloat16>::value;
#else
template <typename T>
constexpr bool kArchHas = true;
#endif

template <typename T>
struct Two;
template <>
struct Two<__half> {
  using Pair = __half2;
  static __device__ __forceinline__ Pair Pack(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ __half Round(float a) { return __float2half_rn(a); }
};
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // unused (and so warned about) where kArchHas is false
template <>
struct Two<__nv_bfloat16> {
  using Pair = __nv_bfloat162;
  static __device__ __forceinline__ Pair Pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __forceinline__ __nv_bfloat16 Round(float a) { return __float2bfloat16_rn(a); }
};
#endif

template <typename T, typename Layout>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, Layout>;
template <typename T, typename Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

struct Params {
  const float* qkv;
  const int32_t* start;  // [batch*seq] segment start per token, or null (plain causal)
  const float* lse;      // backward input
  const float* dout;
  const float* delta;
  float* o;  // forward outputs
  float* lse_out;
  float* dqkv;
  int batch, seq, n_heads, n_kv, hd, group;
  int64_t qkv_stride, out_stride;
  float scale;
  bool vec;  // qkv and dout allow 16-byte loads
};

__device__ __forceinline__ const float* QPtr(const Params& p, int b, int h) {
  return p.qkv + static_cast<int64_t>(b) * p.seq * p.qkv_stride + static_cast<int64_t>(h) * p.hd;
}
__device__ __forceinline__ const float* KPtr(const Params& p, int b, int g) { return QPtr(p, b, p.n_heads + g); }
__device__ __forceinline__ const float* VPtr(const Params& p, int b, int g) {
  return QPtr(p, b, p.n_heads + p.n_kv + g);
}
__device__ __forceinline__ const float* DoutPtr(const Params& p, int b, int h) {
  return p.dout + static_cast<int64_t>(b) * p.seq * p.out_stride + static_cast<int64_t>(h) * p.hd;
}
__device__ __forceinline__ int StartOf(const Params& p, int b, int i) {
  return p.start ? p.start[static_cast<int64_t>(b) * p.seq + i] : 0;
}
// Query i sees key j: same segment and not in the future.
__device__ __forceinline__ bool Visible(int i, int j, int seq, int start) { return i < seq && j <= i && j >= start; }

// dst[r * (D + kPadT) + d] = src row r0 + r, column d, rounded to T (nearest
// even); zero for rows past seq and columns past hd (a multiple of 16).
template <typename T, int ROWS, int D, int NT>
__device__ __forceinline__ void LoadTile(T* dst, const float* src, int64_t stride, int r0, int seq, int hd,
                                         bool vec) {
  constexpr int kLd = D + kPadT, kGroups = D / 4;
  for (int idx = threadIdx.x; idx < ROWS * kGroups; idx += NT) {
    const int r = idx / kGroups, d = (idx % kGroups) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + r < seq && d < hd) {
      const float* s = src + static_cast<int64_t>(r0 + r) * stride + d;
      if (vec) v = *reinterpret_cast<const float4*>(s);
      else v = make_float4(s[0], s[1], s[2], s[3]);
    }
    auto* o = reinterpret_cast<typename Two<T>::Pair*>(dst + r * kLd + d);
    o[0] = Two<T>::Pack(v.x, v.y);
    o[1] = Two<T>::Pack(v.z, v.w);
  }
}

// Per-row values of the query tile at q0: segment starts and, when lse_s is
// given, the saved log-sum-exp and delta. Rows past seq get 0 (they are masked).
template <int BR, int NT>
__device__ __forceinline__ void LoadRows(const Params& p, int b, int h, int q0, int* start_s, float* lse_s,
                                         float* dl_s) {
  for (int r = threadIdx.x; r < BR; r += NT) {
    const int i = q0 + r;
    const bool in = i < p.seq;
    start_s[r] = in ? StartOf(p, b, i) : 0;
    if (lse_s) {
      const int64_t li = (static_cast<int64_t>(b) * p.n_heads + h) * p.seq + i;
      lse_s[r] = in ? p.lse[li] : 0.0f;
      dl_s[r] = in ? p.delta[li] : 0.0f;
    }
  }
}

// Writes a warp's 16 x 16 fp32 fragment, times `mul`, to rows row0.. (those
// below seq) of dst (row stride `stride`), staging it in the warp's `stage`
// (16 rows of ld floats) so that no register layout is assumed.
__device__ __forceinline__ void StoreFrag(const FragC& f, float* stage, int ld, float* dst, int64_t stride,
                                          int row0, int seq, float mul, int lane) {
  wmma::store_matrix_sync(stage, f, ld, wmma::mem_row_major);
  __syncwarp();
  for (int idx = lane; idx < 256; idx += 32) {
    const int rr = idx / 16, cc = idx % 16;
    if (row0 + rr < seq) dst[static_cast<int64_t>(row0 + rr) * stride + cc] = mul * stage[rr * ld + cc];
  }
  __syncwarp();
}

// ---- Shared-memory layouts ------------------------------------------------------
template <typename T, int D, int BR, int BC>
struct FwdCfg {
  static constexpr int kThreads = BR / 16 * 32;
  static constexpr int ldt = D + kPadT, lds = BC + kPadF, ldp = BC + kPadT, ldo = D + kPadF;
  static constexpr size_t o_off = 0;                                       // O   [BR][ldo] fp32
  static constexpr size_t s_off = o_off + sizeof(float) * BR * ldo;       // S   [BR][lds] fp32
  static constexpr size_t q_off = s_off + sizeof(float) * BR * lds;       // Q   [BR][ldt]
  static constexpr size_t k_off = q_off + sizeof(T) * BR * ldt;           // K   [BC][ldt]
  static constexpr size_t v_off = k_off + sizeof(T) * BC * ldt;           // V   [BC][ldt]
  static constexpr size_t p_off = v_off + sizeof(T) * BC * ldt;           // P   [BR][ldp]
  static constexpr size_t row_off = p_off + sizeof(T) * BR * ldp;         // start [BR] int, 1/l [BR]
  static constexpr size_t smem = row_off + 2 * sizeof(float) * BR;
  static_assert(s_off % 32 == 0 && q_off % 32 == 0 && k_off % 32 == 0 && v_off % 32 == 0 && p_off % 32 == 0 &&
                    row_off % 32 == 0,
                "wmma tiles must start 32-byte aligned");
};

template <typename T, int D, int BR, int BC>
struct DqCfg {
  static constexpr int kThreads = BR / 16 * 32;
  static constexpr int ldt = D + kPadT, lds = BC + kPadF, ldp = BC + kPadT;
  static constexpr size_t s_off = 0;                                    // S   [BR][lds] fp32
  static constexpr size_t dp_off = s_off + sizeof(float) * BR * lds;   // dP  [BR][lds] fp32
  static constexpr size_t q_off = dp_off + sizeof(float) * BR * lds;   // Q   [BR][ldt]
  static constexpr size_t do_off = q_off + sizeof(T) * BR * ldt;       // dO  [BR][ldt]
  static constexpr size_t k_off = do_off + sizeof(T) * BR * ldt;       // K   [BC][ldt]
  static constexpr size_t v_off = k_off + sizeof(T) * BC * ldt;        // V   [BC][ldt]
  static constexpr size_t ds_off = v_off + sizeof(T) * BC * ldt;       // dS  [BR][ldp]
  static constexpr size_t row_off = ds_off + sizeof(T) * BR * ldp;    // start, lse, delta [BR]
  static constexpr size_t smem = row_off + 3 * sizeof(float) * BR;
  static_assert(dp_off % 32 == 0 && q_off % 32 == 0 && do_off % 32 == 0 && k_off % 32 == 0 && v_off % 32 == 0 &&
                    ds_off % 32 == 0 && row_off % 32 == 0,
                "wmma tiles must start 32-byte aligned");
};

template <typename T, int D, int BC, int BR>
struct DkvCfg {
  static constexpr int kThreads = BC / 16 * 32;
  static constexpr int ldt = D + kPadT, lds = BR + kPadF, ldp = BR + kPadT;
  static constexpr size_t st_off = 0;                                    // S^T  [BC][lds] fp32
  static constexpr size_t dpt_off = st_off + sizeof(float) * BC * lds;  // dP^T [BC][lds] fp32
  static constexpr size_t k_off = dpt_off + sizeof(float) * BC * lds;   // K    [BC][ldt]
  static constexpr size_t v_off = k_off + sizeof(T) * BC * ldt;         // V    [BC][ldt]
  static constexpr size_t q_off = v_off + sizeof(T) * BC * ldt;         // Q    [BR][ldt]
  static constexpr size_t do_off = q_off + sizeof(T) * BR * ldt;        // dO   [BR][ldt]
  static constexpr size_t pt_off = do_off + sizeof(T) * BR * ldt;       // P^T  [BC][ldp]
  static constexpr size_t dst_off = pt_off + sizeof(T) * BC * ldp;      // dS^T [BC][ldp]
  static constexpr size_t row_off = dst_off + sizeof(T) * BC * ldp;     // start, lse, delta [BR]
  static constexpr size_t smem = row_off + 3 * sizeof(float) * BR;
  static_assert(dpt_off % 32 == 0 && k_off % 32 == 0 && v_off % 32 == 0 && q_off % 32 == 0 && do_off % 32 == 0 &&
                    pt_off % 32 == 0 && dst_off % 32 == 0 && row_off % 32 == 0,
                "wmma tiles must start 32-byte aligned");
};

// Tile shapes per D (query rows BR, key rows BC; 16 rows per warp), chosen to
// stay under 64 KB of shared memory on every architecture:
//   D = 64:  forward 64 x 32 (~50 KB), dQ 64 x 32 (~51 KB), dK/dV 64 keys x 32 queries (~55 KB)
//   D = 128: forward 32 x 32 (~49 KB), dQ 32 x 32 (~46 KB), dK/dV 32 keys x 32 queries (~48 KB)
template <typename T, int D>
struct Tiles;
template <typename T>
struct Tiles<T, 64> {
  using Fwd = FwdCfg<T, 64, 64, 32>;
  using Dq = DqCfg<T, 64, 64, 32>;
  using Dkv = DkvCfg<T, 64, 64, 32>;
  static constexpr int kFwdBr = 64, kFwdBc = 32, kDqBr = 64, kDqBc = 32, kKvBc = 64, kKvBr = 32;
};
template <typename T>
struct Tiles<T, 128> {
  using Fwd = FwdCfg<T, 128, 32, 32>;
  using Dq = DqCfg<T, 128, 32, 32>;
  using Dkv = DkvCfg<T, 128, 32, 32>;
  static constexpr int kFwdBr = 32, kFwdBc = 32, kDqBr = 32, kDqBc = 32, kKvBc = 32, kKvBr = 32;
};

template <typename T, int D>
constexpr size_t MaxSmem() {
  using X = Tiles<T, D>;
  size_t m = X::Fwd::smem;
  if (X::Dq::smem > m) m = X::Dq::smem;
  if (X::Dkv::smem > m) m = X::Dkv::smem;
  return m;
}
static_assert(MaxSmem<__half, 64>() <= 64 * 1024 && MaxSmem<__half, 128>() <= 64 * 1024,
              "tensor-core attention tiles must fit the 64 KB shared-memory opt-in of sm_75");

template <typename Kernel>
inline void Launch(Kernel k, dim3 grid, int threads, size_t smem, const Params& p, Stream s, const char* what) {
  // As in cuda_attention.cu: the > 48 KB opt-in is per kernel and cheap to repeat.
  cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  SHARD_CHECK_MSG(e == cudaSuccess, std::string("cuda backend: ") + what + " needs " + std::to_string(smem) +
                                        " bytes of shared memory: " + cudaGetErrorString(e));
  k<<<grid, threads, smem, S(s)>>>(p);
  CheckLaunch(what);
}

inline bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// The kernels' parameters for a shape (segment starts already computed);
// aborts unless AttentionTcSupported(sh).
Params MakeParams(const AttentionShape& sh, const float* qkv, const int32_t* start);

}  // namespace shard::cuda::tc
