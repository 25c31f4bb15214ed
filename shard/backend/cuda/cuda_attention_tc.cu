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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "shard/backend/cuda/cuda_kernels.h"

namespace shard::cuda {
namespace {

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

// ---- Forward -------------------------------------------------------------------
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
__device__ __forceinline__ void ForwardBody(const Params& p) {
  using C = FwdCfg<T, D, BR, BC>;
  constexpr int kDt = D / 16, kCt = BC / 16;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  float* Os = reinterpret_cast<float*>(tc_smem + C::o_off);
  float* Ss = reinterpret_cast<float*>(tc_smem + C::s_off);
  T* Qs = reinterpret_cast<T*>(tc_smem + C::q_off);
  T* Ks = reinterpret_cast<T*>(tc_smem + C::k_off);
  T* Vs = reinterpret_cast<T*>(tc_smem + C::v_off);
  T* Ps = reinterpret_cast<T*>(tc_smem + C::p_off);
  int* start_s = reinterpret_cast<int*>(tc_smem + C::row_off);
  float* inv_s = reinterpret_cast<float*>(start_s + BR);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z, g = h / p.group;
  const int nd = p.hd / 16;
  LoadTile<T, BR, D, C::kThreads>(Qs, QPtr(p, b, h), p.qkv_stride, q0, p.seq, p.hd, p.vec);
  for (int idx = threadIdx.x; idx < BR * C::ldo; idx += C::kThreads) Os[idx] = 0.0f;
  LoadRows<BR, C::kThreads>(p, b, h, q0, start_s, nullptr, nullptr);
  __syncthreads();

  const int wr0 = warp * 16;  // the warp's rows within the tile
  const bool live = q0 + wr0 < p.seq;
  const int w_last = min(q0 + wr0 + 15, p.seq - 1);  // its last real query
  FragA<T, wmma::row_major> qf[kDt];  // the warp's Q rows stay in registers
#pragma unroll
  for (int t = 0; t < kDt; ++t)
    if (t < nd) wmma::load_matrix_sync(qf[t], Qs + wr0 * C::ldt + t * 16, C::ldt);

  // Softmax: lanes 2r and 2r+1 take the even and odd columns of the warp's row r.
  const int r = wr0 + lane / 2, half = lane % 2, i = q0 + r;
  float m = -INFINITY, l = 0.0f;
  const int k_end = min(q0 + BR, p.seq);  // the tile's last row sees keys up to itself
  for (int k0 = start_s[0] / BC * BC; k0 < k_end; k0 += BC) {
    __syncthreads();  // every warp is done with the previous K and V
    LoadTile<T, BC, D, C::kThreads>(Ks, KPtr(p, b, g), p.qkv_stride, k0, p.seq, p.hd, p.vec);
    LoadTile<T, BC, D, C::kThreads>(Vs, VPtr(p, b, g), p.qkv_stride, k0, p.seq, p.hd, p.vec);
    __syncthreads();
    // Key column tiles holding a key the warp's rows may see: none past its last
    // row (causal), none if the tile ends before its first row's segment starts.
    int ncol = 0;
    if (live && w_last >= k0 && start_s[wr0] < k0 + BC) ncol = min(kCt, (w_last - k0) / 16 + 1);
    if (ncol == 0) continue;  // warp-uniform; its rows see nothing here

    for (int ct = 0; ct < ncol; ++ct) {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int t = 0; t < kDt; ++t) {
        if (t < nd) {
          FragB<T, wmma::col_major> kf;  // K^T: element (d, key) at Ks[key * ldt + d]
          wmma::load_matrix_sync(kf, Ks + ct * 16 * C::ldt + t * 16, C::ldt);
          wmma::mma_sync(acc, qf[t], kf, acc);
        }
      }
      wmma::store_matrix_sync(Ss + wr0 * C::lds + ct * 16, acc, C::lds, wmma::mem_row_major);
    }
    __syncwarp();

    const int ncols = ncol * 16, st = start_s[r];
    float mx = -INFINITY;
    for (int c = half; c < ncols; c += 2)
      if (Visible(i, k0 + c, p.seq, st)) mx = fmaxf(mx, Ss[r * C::lds + c] * p.scale);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    const float shift = m_new == -INFINITY ? 0.0f : m_new;  // no visible key yet: zeros, not NaN
    const float alpha = __expf(m - shift);                   // 0 while m is -inf
    float sum = 0.0f;
    for (int c = half; c < ncols; c += 2) {
      const float pv = Visible(i, k0 + c, p.seq, st) ? __expf(Ss[r * C::lds + c] * p.scale - shift) : 0.0f;
      Ps[r * C::ldp + c] = Two<T>::Round(pv);
      sum += pv;  // l sums the fp32 probabilities
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    if (alpha != 1.0f)
      for (int d = half; d < nd * 16; d += 2) Os[r * C::ldo + d] *= alpha;
    __syncwarp();

    FragA<T, wmma::row_major> pf[kCt];
#pragma unroll
    for (int t = 0; t < kCt; ++t)
      if (t < ncol) wmma::load_matrix_sync(pf[t], Ps + wr0 * C::ldp + t * 16, C::ldp);
#pragma unroll
    for (int dt = 0; dt < kDt; ++dt) {
      if (dt < nd) {
        FragC acc;
        wmma::load_matrix_sync(acc, Os + wr0 * C::ldo + dt * 16, C::ldo, wmma::mem_row_major);
#pragma unroll
        for (int t = 0; t < kCt; ++t) {
          if (t < ncol) {
            FragB<T, wmma::row_major> vf;
            wmma::load_matrix_sync(vf, Vs + t * 16 * C::ldt + dt * 16, C::ldt);
            wmma::mma_sync(acc, pf[t], vf, acc);
          }
        }
        wmma::store_matrix_sync(Os + wr0 * C::ldo + dt * 16, acc, C::ldo, wmma::mem_row_major);
      }
    }
  }

  if (half == 0) {
    inv_s[r] = l > 0.0f ? 1.0f / l : 0.0f;  // every real row sees itself, so l > 0 there
    if (i < p.seq) p.lse_out[(static_cast<int64_t>(b) * p.n_heads + h) * p.seq + i] = m + logf(l);
  }
  __syncwarp();  // inv_s and the last O stores are visible to the whole warp
  if (!live) return;
  // The warp writes its 16 rows together (lanes along the head dim: coalesced).
  const int64_t ocol = static_cast<int64_t>(h) * p.hd;
  for (int idx = lane; idx < 16 * p.hd; idx += 32) {
    const int rr = idx / p.hd, d = idx % p.hd, ii = q0 + wr0 + rr;
    if (ii < p.seq)
      p.o[(static_cast<int64_t>(b) * p.seq + ii) * p.out_stride + ocol + d] =
          Os[(wr0 + rr) * C::ldo + d] * inv_s[wr0 + rr];
  }
}

template <typename T, int D, int BR, int BC>
__global__ void __launch_bounds__(BR / 16 * 32) ForwardTcKernel(Params p) {
  if constexpr (kArchHas<T>) ForwardBody<T, D, BR, BC>(p);
  else __trap();
}

// ---- Backward: dQ ----------------------------------------------------------------
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

template <typename T, int D, int BR, int BC>
__device__ __forceinline__ void BwdDqBody(const Params& p) {
  using C = DqCfg<T, D, BR, BC>;
  constexpr int kDt = D / 16, kCt = BC / 16;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  float* Ss = reinterpret_cast<float*>(tc_smem + C::s_off);
  float* dPs = reinterpret_cast<float*>(tc_smem + C::dp_off);
  T* Qs = reinterpret_cast<T*>(tc_smem + C::q_off);
  T* dOs = reinterpret_cast<T*>(tc_smem + C::do_off);
  T* Ks = reinterpret_cast<T*>(tc_smem + C::k_off);
  T* Vs = reinterpret_cast<T*>(tc_smem + C::v_off);
  T* dSs = reinterpret_cast<T*>(tc_smem + C::ds_off);
  int* start_s = reinterpret_cast<int*>(tc_smem + C::row_off);
  float* lse_s = reinterpret_cast<float*>(start_s + BR);
  float* dl_s = lse_s + BR;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z, g = h / p.group;
  const int nd = p.hd / 16;
  LoadTile<T, BR, D, C::kThreads>(Qs, QPtr(p, b, h), p.qkv_stride, q0, p.seq, p.hd, p.vec);
  LoadTile<T, BR, D, C::kThreads>(dOs, DoutPtr(p, b, h), p.out_stride, q0, p.seq, p.hd, p.vec);
  LoadRows<BR, C::kThreads>(p, b, h, q0, start_s, lse_s, dl_s);
  __syncthreads();

  const int wr0 = warp * 16;
  const bool live = q0 + wr0 < p.seq;
  const int w_last = min(q0 + wr0 + 15, p.seq - 1);
  FragC dq[kDt];
#pragma unroll
  for (int t = 0; t < kDt; ++t) wmma::fill_fragment(dq[t], 0.0f);

  const int k_end = min(q0 + BR, p.seq);
  for (int k0 = start_s[0] / BC * BC; k0 < k_end; k0 += BC) {
    __syncthreads();
    LoadTile<T, BC, D, C::kThreads>(Ks, KPtr(p, b, g), p.qkv_stride, k0, p.seq, p.hd, p.vec);
    LoadTile<T, BC, D, C::kThreads>(Vs, VPtr(p, b, g), p.qkv_stride, k0, p.seq, p.hd, p.vec);
    __syncthreads();
    int ncol = 0;
    if (live && w_last >= k0 && start_s[wr0] < k0 + BC) ncol = min(kCt, (w_last - k0) / 16 + 1);
    if (ncol == 0) continue;

    for (int ct = 0; ct < ncol; ++ct) {
      FragC s, dp;
      wmma::fill_fragment(s, 0.0f);
      wmma::fill_fragment(dp, 0.0f);
#pragma unroll
      for (int t = 0; t < kDt; ++t) {
        if (t < nd) {
          FragA<T, wmma::row_major> a;
          FragB<T, wmma::col_major> bt;
          wmma::load_matrix_sync(a, Qs + wr0 * C::ldt + t * 16, C::ldt);
          wmma::load_matrix_sync(bt, Ks + ct * 16 * C::ldt + t * 16, C::ldt);
          wmma::mma_sync(s, a, bt, s);
          wmma::load_matrix_sync(a, dOs + wr0 * C::ldt + t * 16, C::ldt);
          wmma::load_matrix_sync(bt, Vs + ct * 16 * C::ldt + t * 16, C::ldt);
          wmma::mma_sync(dp, a, bt, dp);
        }
      }
      wmma::store_matrix_sync(Ss + wr0 * C::lds + ct * 16, s, C::lds, wmma::mem_row_major);
      wmma::store_matrix_sync(dPs + wr0 * C::lds + ct * 16, dp, C::lds, wmma::mem_row_major);
    }
    __syncwarp();

    // dS = P (dP - delta) with P = exp(scale S - lse), on the warp's 16 x ncols block.
    const int ncols = ncol * 16;
    for (int idx = lane; idx < 16 * ncols; idx += 32) {
      const int r = wr0 + idx / ncols, c = idx % ncols;
      float ds = 0.0f;
      if (Visible(q0 + r, k0 + c, p.seq, start_s[r])) {
        const float pv = __expf(Ss[r * C::lds + c] * p.scale - lse_s[r]);
        ds = pv * (dPs[r * C::lds + c] - dl_s[r]);
      }
      dSs[r * C::ldp + c] = Two<T>::Round(ds);
    }
    __syncwarp();

    FragA<T, wmma::row_major> dsf[kCt];
#pragma unroll
    for (int t = 0; t < kCt; ++t)
      if (t < ncol) wmma::load_matrix_sync(dsf[t], dSs + wr0 * C::ldp + t * 16, C::ldp);
#pragma unroll
    for (int dt = 0; dt < kDt; ++dt) {
      if (dt < nd) {
#pragma unroll
        for (int t = 0; t < kCt; ++t) {
          if (t < ncol) {
            FragB<T, wmma::row_major> kf;  // K: element (key, d) at Ks[key * ldt + d]
            wmma::load_matrix_sync(kf, Ks + t * 16 * C::ldt + dt * 16, C::ldt);
            wmma::mma_sync(dq[dt], dsf[t], kf, dq[dt]);
          }
        }
      }
    }
  }

  if (!live) return;
  __syncwarp();  // the warp's last reads of its S rows (the staging area) are done
  float* dst = p.dqkv + static_cast<int64_t>(b) * p.seq * p.qkv_stride + static_cast<int64_t>(h) * p.hd;
#pragma unroll
  for (int dt = 0; dt < kDt; ++dt)
    if (dt < nd)
      StoreFrag(dq[dt], Ss + wr0 * C::lds, C::lds, dst + dt * 16, p.qkv_stride, q0 + wr0, p.seq, p.scale, lane);
}

template <typename T, int D, int BR, int BC>
__global__ void __launch_bounds__(BR / 16 * 32) BwdDqTcKernel(Params p) {
  if constexpr (kArchHas<T>) BwdDqBody<T, D, BR, BC>(p);
  else __trap();
}

// ---- Backward: dK, dV --------------------------------------------------------------
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

template <typename T, int D, int BC, int BR>
__device__ __forceinline__ void BwdDkDvBody(const Params& p) {
  using C = DkvCfg<T, D, BC, BR>;
  constexpr int kDt = D / 16, kRt = BR / 16;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  float* STs = reinterpret_cast<float*>(tc_smem + C::st_off);
  float* dPTs = reinterpret_cast<float*>(tc_smem + C::dpt_off);
  T* Ks = reinterpret_cast<T*>(tc_smem + C::k_off);
  T* Vs = reinterpret_cast<T*>(tc_smem + C::v_off);
  T* Qs = reinterpret_cast<T*>(tc_smem + C::q_off);
  T* dOs = reinterpret_cast<T*>(tc_smem + C::do_off);
  T* PTs = reinterpret_cast<T*>(tc_smem + C::pt_off);
  T* dSTs = reinterpret_cast<T*>(tc_smem + C::dst_off);
  int* start_s = reinterpret_cast<int*>(tc_smem + C::row_off);
  float* lse_s = reinterpret_cast<float*>(start_s + BR);
  float* dl_s = lse_s + BR;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = blockIdx.x * BC, g = blockIdx.y, b = blockIdx.z;
  const int nd = p.hd / 16;
  const int k_last = min(k0 + BC, p.seq) - 1;  // the block's last key
  LoadTile<T, BC, D, C::kThreads>(Ks, KPtr(p, b, g), p.qkv_stride, k0, p.seq, p.hd, p.vec);
  LoadTile<T, BC, D, C::kThreads>(Vs, VPtr(p, b, g), p.qkv_stride, k0, p.seq, p.hd, p.vec);

  const int wc0 = warp * 16;  // the warp's keys within the tile
  const int key_first = k0 + wc0, key_last = min(k0 + wc0 + 15, p.seq - 1);
  const bool live = key_first < p.seq;
  FragC dk[kDt], dv[kDt];
#pragma unroll
  for (int t = 0; t < kDt; ++t) {
    wmma::fill_fragment(dk[t], 0.0f);
    wmma::fill_fragment(dv[t], 0.0f);
  }

  for (int h = g * p.group; h < (g + 1) * p.group; ++h) {
    for (int q0 = k0 / BR * BR; q0 < p.seq; q0 += BR) {
      if (StartOf(p, b, q0) > k_last) break;  // starts never decrease: no later row sees these keys
      __syncthreads();  // K, V loaded (first pass); the previous Q, dO no longer read
      LoadTile<T, BR, D, C::kThreads>(Qs, QPtr(p, b, h), p.qkv_stride, q0, p.seq, p.hd, p.vec);
      LoadTile<T, BR, D, C::kThreads>(dOs, DoutPtr(p, b, h), p.out_stride, q0, p.seq, p.hd, p.vec);
      LoadRows<BR, C::kThreads>(p, b, h, q0, start_s, lse_s, dl_s);
      __syncthreads();
      if (!live) continue;
      // Query row tiles [rt0, rt1) that may see the warp's keys: real rows at or
      // after its first key (causal) whose segment starts by its last key (a
      // tile's first row has its smallest start).
      int rt0 = key_first > q0 ? (key_first - q0) / 16 : 0;
      int rt1 = (min(BR, p.seq - q0) + 15) / 16;
      while (rt1 > rt0 && start_s[(rt1 - 1) * 16] > key_last) --rt1;
      if (rt0 >= rt1) continue;

      for (int rt = rt0; rt < rt1; ++rt) {
        FragC s, dp;
        wmma::fill_fragment(s, 0.0f);
        wmma::fill_fragment(dp, 0.0f);
#pragma unroll
        for (int t = 0; t < kDt; ++t) {
          if (t < nd) {
            FragA<T, wmma::row_major> a;
            FragB<T, wmma::col_major> bt;  // Q^T / dO^T: element (d, query) at [query * ldt + d]
            wmma::load_matrix_sync(a, Ks + wc0 * C::ldt + t * 16, C::ldt);
            wmma::load_matrix_sync(bt, Qs + rt * 16 * C::ldt + t * 16, C::ldt);
            wmma::mma_sync(s, a, bt, s);
            wmma::load_matrix_sync(a, Vs + wc0 * C::ldt + t * 16, C::ldt);
            wmma::load_matrix_sync(bt, dOs + rt * 16 * C::ldt + t * 16, C::ldt);
            wmma::mma_sync(dp, a, bt, dp);
          }
        }
        wmma::store_matrix_sync(STs + wc0 * C::lds + rt * 16, s, C::lds, wmma::mem_row_major);
        wmma::store_matrix_sync(dPTs + wc0 * C::lds + rt * 16, dp, C::lds, wmma::mem_row_major);
      }
      __syncwarp();

      // P^T and dS^T on the warp's 16 keys x query columns [16 rt0, 16 rt1).
      const int c0 = rt0 * 16, nc = (rt1 - rt0) * 16;
      for (int idx = lane; idx < 16 * nc; idx += 32) {
        const int kr = wc0 + idx / nc, r = c0 + idx % nc;
        float pv = 0.0f, ds = 0.0f;
        if (Visible(q0 + r, k0 + kr, p.seq, start_s[r])) {
          pv = __expf(STs[kr * C::lds + r] * p.scale - lse_s[r]);
          ds = pv * (dPTs[kr * C::lds + r] - dl_s[r]);
        }
        PTs[kr * C::ldp + r] = Two<T>::Round(pv);
        dSTs[kr * C::ldp + r] = Two<T>::Round(ds);
      }
      __syncwarp();

      FragA<T, wmma::row_major> pf[kRt], dsf[kRt];
#pragma unroll
      for (int t = 0; t < kRt; ++t) {
        if (t >= rt0 && t < rt1) {
          wmma::load_matrix_sync(pf[t], PTs + wc0 * C::ldp + t * 16, C::ldp);
          wmma::load_matrix_sync(dsf[t], dSTs + wc0 * C::ldp + t * 16, C::ldp);
        }
      }
#pragma unroll
      for (int dt = 0; dt < kDt; ++dt) {
        if (dt < nd) {
#pragma unroll
          for (int t = 0; t < kRt; ++t) {
            if (t >= rt0 && t < rt1) {
              FragB<T, wmma::row_major> bn;  // dO / Q: element (query, d) at [query * ldt + d]
              wmma::load_matrix_sync(bn, dOs + t * 16 * C::ldt + dt * 16, C::ldt);
              wmma::mma_sync(dv[dt], pf[t], bn, dv[dt]);
              wmma::load_matrix_sync(bn, Qs + t * 16 * C::ldt + dt * 16, C::ldt);
              wmma::mma_sync(dk[dt], dsf[t], bn, dk[dt]);
            }
          }
        }
      }
    }
  }

  if (!live) return;
  __syncwarp();
  float* row0 = p.dqkv + static_cast<int64_t>(b) * p.seq * p.qkv_stride;
  float* kdst = row0 + static_cast<int64_t>(p.n_heads + g) * p.hd;
  float* vdst = row0 + static_cast<int64_t>(p.n_heads + p.n_kv + g) * p.hd;
  float* stage = STs + wc0 * C::lds;
#pragma unroll
  for (int dt = 0; dt < kDt; ++dt) {
    if (dt < nd) {
      StoreFrag(dk[dt], stage, C::lds, kdst + dt * 16, p.qkv_stride, key_first, p.seq, p.scale, lane);
      StoreFrag(dv[dt], stage, C::lds, vdst + dt * 16, p.qkv_stride, key_first, p.seq, 1.0f, lane);
    }
  }
}

template <typename T, int D, int BC, int BR>
__global__ void __launch_bounds__(BC / 16 * 32) BwdDkDvTcKernel(Params p) {
  if constexpr (kArchHas<T>) BwdDkDvBody<T, D, BC, BR>(p);
  else __trap();
}

// ---- Backward: delta --------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ float RoundThrough(float x);
template <>
__device__ __forceinline__ float RoundThrough<__half>(float x) { return __half2float(__float2half_rn(x)); }
template <>
__device__ __forceinline__ float RoundThrough<__nv_bfloat16>(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

// delta[b, h, t] = round(dO[b, t, h, :]) . O[b, t, h, :], one warp per (b, t, h).
// dO rounded as in dP = dO V^T, so that sum_j P_ij dP_ij - delta_i stays ~0
// (the fp32 delta would leave a rounding-size residue in every dS row, e.g.
// dQ = dK = noise instead of 0 at seq 1).
template <typename T>
__global__ void DeltaTcKernel(Params p, const float* out) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= static_cast<int64_t>(p.batch) * p.seq * p.n_heads) return;
  const int h = static_cast<int>(w % p.n_heads);
  const int64_t bt = w / p.n_heads;  // b * seq + t
  const float* o = out + bt * p.out_stride + static_cast<int64_t>(h) * p.hd;
  const float* d = p.dout + bt * p.out_stride + static_cast<int64_t>(h) * p.hd;
  float acc = 0.0f;
  for (int j = lane; j < p.hd; j += 32) acc += o[j] * RoundThrough<T>(d[j]);
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const int64_t b = bt / p.seq, t = bt % p.seq;
    const_cast<float*>(p.delta)[(b * p.n_heads + h) * p.seq + t] = acc;
  }
}

// ---- Host side ----------------------------------------------------------------------
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
void Launch(Kernel k, dim3 grid, int threads, size_t smem, const Params& p, Stream s, const char* what) {
  // As in cuda_attention.cu: the > 48 KB opt-in is per kernel and cheap to repeat.
  cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  SHARD_CHECK_MSG(e == cudaSuccess, std::string("cuda backend: ") + what + " needs " + std::to_string(smem) +
                                        " bytes of shared memory: " + cudaGetErrorString(e));
  k<<<grid, threads, smem, S(s)>>>(p);
  CheckLaunch(what);
}

template <typename T, int D>
void Forward(const Params& p, Stream s) {
  using X = Tiles<T, D>;
  dim3 grid((p.seq + X::kFwdBr - 1) / X::kFwdBr, p.n_heads, p.batch);
  Launch(ForwardTcKernel<T, D, X::kFwdBr, X::kFwdBc>, grid, X::Fwd::kThreads, X::Fwd::smem, p, s,
         "AttentionForward (tensor cores)");
}

template <typename T, int D>
void Backward(const Params& p, Stream s) {
  using X = Tiles<T, D>;
  dim3 gq((p.seq + X::kDqBr - 1) / X::kDqBr, p.n_heads, p.batch);
  Launch(BwdDqTcKernel<T, D, X::kDqBr, X::kDqBc>, gq, X::Dq::kThreads, X::Dq::smem, p, s,
         "AttentionBackward (tensor cores, dQ)");
  dim3 gk((p.seq + X::kKvBc - 1) / X::kKvBc, p.n_kv, p.batch);
  Launch(BwdDkDvTcKernel<T, D, X::kKvBc, X::kKvBr>, gk, X::Dkv::kThreads, X::Dkv::smem, p, s,
         "AttentionBackward (tensor cores, dK, dV)");
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

Params MakeParams(const AttentionShape& sh, const float* qkv, const int32_t* start) {
  SHARD_CHECK_MSG(AttentionTcSupported(sh), "cuda attention (tensor cores): unsupported shape or device (head_dim " +
                                                std::to_string(sh.head_dim) + ", compute " + DTypeName(sh.compute) +
                                                "); check AttentionTcSupported first");
  Params p{};
  p.qkv = qkv;
  p.start = start;
  p.batch = static_cast<int>(sh.batch);
  p.seq = static_cast<int>(sh.seq);
  p.n_heads = sh.n_heads;
  p.n_kv = sh.n_kv_heads;
  p.hd = sh.head_dim;
  p.group = sh.n_heads / sh.n_kv_heads;
  p.qkv_stride = sh.qkv_stride();
  p.out_stride = sh.out_stride();  // both strides are multiples of 16 floats (head_dim % 16 == 0)
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim)));
  p.vec = Aligned16(qkv);
  return p;
}

}  // namespace

bool AttentionTcSupported(const AttentionShape& sh) {
  if (sh.compute == DType::kF32) return false;
  if (sh.head_dim <= 0 || sh.head_dim % 16 != 0 || sh.head_dim > 128) return false;
  if (sh.n_kv_heads <= 0 || sh.n_heads % sh.n_kv_heads != 0) return false;
  int dev = 0, major = 0, smem_optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const size_t need = sh.head_dim <= 64 ? MaxSmem<__half, 64>() : MaxSmem<__half, 128>();
  if (static_cast<size_t>(smem_optin) < need) return false;
  return sh.compute == DType::kBF16 ? major >= 8 : major >= 7;
}

void LaunchAttentionForwardTc(const AttentionShape& sh, const float* qkv, const int32_t* segment_ids,
                              int32_t* starts, float* out, float* lse, Stream s) {
  if (sh.batch <= 0 || sh.seq <= 0) return;
  Params p = MakeParams(sh, qkv, LaunchAttentionSegmentStarts(sh, segment_ids, starts, s));
  p.o = out;
  p.lse_out = lse;
  const bool bf16 = sh.compute == DType::kBF16;
  if (sh.head_dim <= 64) bf16 ? Forward<__nv_bfloat16, 64>(p, s) : Forward<__half, 64>(p, s);
  else bf16 ? Forward<__nv_bfloat16, 128>(p, s) : Forward<__half, 128>(p, s);
}

void LaunchAttentionBackwardTc(const AttentionShape& sh, const float* qkv, const int32_t* segment_ids,
                               const float* out, const float* lse, const float* dout, float* dqkv,
                               int32_t* starts, float* delta, Stream s) {
  if (sh.batch <= 0 || sh.seq <= 0) return;
  Params p = MakeParams(sh, qkv, LaunchAttentionSegmentStarts(sh, segment_ids, starts, s));
  p.lse = lse;
  p.dout = dout;
  p.delta = delta;
  p.dqkv = dqkv;
  p.vec = p.vec && Aligned16(dout);
  const bool bf16 = sh.compute == DType::kBF16;
  const int64_t warps = sh.batch * sh.seq * sh.n_heads;
  const unsigned delta_blocks = static_cast<unsigned>((warps * 32 + 255) / 256);
  if (bf16) DeltaTcKernel<__nv_bfloat16><<<delta_blocks, 256, 0, S(s)>>>(p, out);
  else DeltaTcKernel<__half><<<delta_blocks, 256, 0, S(s)>>>(p, out);
  CheckLaunch("AttentionBackward (tensor cores, delta)");
  if (sh.head_dim <= 64) bf16 ? Backward<__nv_bfloat16, 64>(p, s) : Backward<__half, 64>(p, s);
  else bf16 ? Backward<__nv_bfloat16, 128>(p, s) : Backward<__half, 128>(p, s);
}

}  // namespace shard::cuda
