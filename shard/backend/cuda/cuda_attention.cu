// Causal grouped-query attention, flash-attention style, in fp32 on CUDA cores.
//
// No [seq, seq] matrix ever reaches global memory: each block holds a tile of
// queries (or keys) in shared memory and streams the other side through in
// tiles, with an online softmax in the forward pass and the saved log-sum-exp
// in the backward pass. Masking is a key range per query row: keys from the
// start of the row's segment (packed samples; segments are contiguous runs of
// equal segment_ids) up to the row itself.
//
// Kernels (256 threads as a 16 x 16 grid; thread (ty, tx) owns a small
// register tile of every product, rows from ty and columns from tx):
//   Forward   grid (query tiles, heads, batch): S = Q K^T, online softmax, O = P V.
//   BwdDq     grid (query tiles, heads, batch): recompute P, dP = dO V^T,
//             dS = P (dP - D), dQ = scale dS K.
//   BwdDkDv   grid (key tiles, kv heads, batch): loops over the query heads of
//             its group and the query tiles that see its keys; dV += P^T dO,
//             dK += dS^T (scale Q). Owning a kv head's keys makes the
//             accumulation race-free and in a fixed order: no atomics, so the
//             backward is deterministic (at the cost of recomputing S and dP
//             in both backward kernels).
// The same kernels serve a chunk of query positions over a longer key range
// (context parallelism, backend.h's AttentionChunk): query row r of the
// launch is position q_off + r, q and k/v come from separate buffers, and the
// dK/dV kernel writes every key row (zero past the chunk's end). The fused
// attention is the case q_off = 0, q_rows = seq, with q/k/v/dq/dk/dv at their
// columns of the fused row.
// Shared-memory operands are stored "k-major" (the reduction index outermost)
// and padded by 4 floats, so each thread reads its row and column fragments
// with 128-bit loads. Tile sizes keep every kernel under 96 KB of shared
// memory (the sm_70 limit).
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "shard/backend/cuda/cuda_attention_shape.cuh"
#include "shard/backend/cuda/cuda_kernels.h"

namespace shard::cuda {
namespace {

inline cudaStream_t S(Stream s) { return static_cast<cudaStream_t>(s); }

constexpr int kThreads = 256;
constexpr int kPad = 4;

// Rows: query row r (position q_off + r) of sequence b at q + (b*q_rows +
// r)*q_stride, and so are out, dout and dq (their strides); key/value row t at
// k/v + (b*seq + t)*kv_stride, and so are dk and dv. lse and delta: [batch,
// n_heads, q_rows]. Head h's columns start at h*hd of each.
struct Params {
  const float* q;
  const float* k;
  const float* v;
  const int32_t* start;  // [batch*seq] segment start per key position, or null (plain causal)
  const float* out;
  const float* lse;
  const float* dout;
  const float* delta;
  float* o;     // forward output
  float* lse_out;
  float* dq;
  float* dk;
  float* dv;
  int batch, seq, q_off, q_rows, n_heads, n_kv, hd, group;
  int64_t q_stride, kv_stride, out_stride, dq_stride, dkv_stride;
  float scale;
};

// Index of the e-th element a thread owns along a tile edge of N = 16 * E
// elements: runs of (up to) 4 consecutive elements per thread, the threads'
// runs side by side, so a warp's fragment loads are contiguous.
template <int E>
__device__ __forceinline__ int Frag(int t, int e) {
  if constexpr (E >= 4) return (e / 4) * 64 + t * 4 + (e % 4);
  else return t * E + e;
}

// out[0..E) = the E fragment elements of row k of a k-major operand.
template <int E>
__device__ __forceinline__ void LoadFrag(const float* base, int t, float (&out)[E]) {
  if constexpr (E >= 4) {
#pragma unroll
    for (int q = 0; q < E / 4; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(base + q * 64 + t * 4);
      out[4 * q] = v.x, out[4 * q + 1] = v.y, out[4 * q + 2] = v.z, out[4 * q + 3] = v.w;
    }
  } else if constexpr (E == 2) {
    const float2 v = *reinterpret_cast<const float2*>(base + t * 2);
    out[0] = v.x, out[1] = v.y;
  } else {
    out[0] = base[t];
  }
}

// acc[a][b] += sum_k A[k][Frag<EA>(ty, a)] * B[k][Frag<EB>(tx, b)] for k < K.
template <int EA, int EB>
__device__ __forceinline__ void Mma(const float* A, int lda, const float* B, int ldb, int K, int ty, int tx,
                                    float (&acc)[EA][EB]) {
#pragma unroll 4
  for (int k = 0; k < K; ++k) {
    float a[EA], b[EB];
    LoadFrag<EA>(A + k * lda, ty, a);
    LoadFrag<EB>(B + k * ldb, tx, b);
#pragma unroll
    for (int i = 0; i < EA; ++i)
#pragma unroll
      for (int j = 0; j < EB; ++j) acc[i][j] += a[i] * b[j];
  }
}

template <int EA, int EB>
__device__ __forceinline__ void Zero(float (&acc)[EA][EB]) {
#pragma unroll
  for (int i = 0; i < EA; ++i)
#pragma unroll
    for (int j = 0; j < EB; ++j) acc[i][j] = 0.0f;
}

// Loads rows [r0, r0 + ROWS) x columns [0, D) of a head slice (row stride
// `stride`, hd real columns, rows past `seq` and columns past hd zero), times
// `mul`, into shared memory: k-major (dst[d * ld + r]) or row-major (dst[r * ld + d]).
template <int ROWS, int D, bool kKMajor>
__device__ __forceinline__ void LoadTile(float* dst, int ld, const float* src, int64_t stride, int r0, int seq,
                                         int hd, float mul) {
  for (int idx = threadIdx.x; idx < ROWS * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float v = 0.0f;
    if (r0 + r < seq && d < hd) v = mul * src[static_cast<int64_t>(r0 + r) * stride + d];
    if constexpr (kKMajor) dst[d * ld + r] = v;
    else dst[r * ld + d] = v;
  }
}

__device__ __forceinline__ float RowMax16(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float RowSum16(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ const float* QPtr(const Params& p, int b, int h) {
  return p.q + static_cast<int64_t>(b) * p.q_rows * p.q_stride + static_cast<int64_t>(h) * p.hd;
}
__device__ __forceinline__ const float* KPtr(const Params& p, int b, int g) {
  return p.k + static_cast<int64_t>(b) * p.seq * p.kv_stride + static_cast<int64_t>(g) * p.hd;
}
__device__ __forceinline__ const float* VPtr(const Params& p, int b, int g) {
  return p.v + static_cast<int64_t>(b) * p.seq * p.kv_stride + static_cast<int64_t>(g) * p.hd;
}
// Segment start of key position i (a query row r asks for position q_off + r).
__device__ __forceinline__ int StartOf(const Params& p, int b, int i) {
  return p.start ? p.start[static_cast<int64_t>(b) * p.seq + i] : 0;
}

// ---- Forward ---------------------------------------------------------------
template <int D, int BR, int BC>
struct FwdCfg {
  static constexpr int EA = BR / 16, EB = BC / 16, ED = D / 16;
  static constexpr int ldq = BR + kPad, ldk = BC + kPad, ldv = D + kPad, ldp = BR + kPad;
  static constexpr int q_floats = D * ldq, k_floats = D * ldk, v_floats = BC * ldv, p_floats = BC * ldp;
  static constexpr size_t smem = sizeof(float) * (q_floats + k_floats + v_floats + p_floats);
};

template <int D, int BR, int BC>
__global__ void __launch_bounds__(kThreads) ForwardKernel(Params p) {
  using C = FwdCfg<D, BR, BC>;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float* Qt = sm;                   // [D][ldq]  q scaled, k-major
  float* Kt = Qt + C::q_floats;     // [D][ldk]
  float* Vn = Kt + C::k_floats;     // [BC][ldv]
  float* Pt = Vn + C::v_floats;     // [BC][ldp] probabilities, k-major
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z, g = h / p.group;
  const int rows = min(BR, p.q_rows - q0);

  LoadTile<BR, D, true>(Qt, C::ldq, QPtr(p, b, h), p.q_stride, q0, p.q_rows, p.hd, p.scale);
  int row_start[C::EA];
  float m[C::EA], l[C::EA], o[C::EA][C::ED];
#pragma unroll
  for (int a = 0; a < C::EA; ++a) {
    const int i = q0 + Frag<C::EA>(ty, a);
    row_start[a] = i < p.q_rows ? StartOf(p, b, p.q_off + i) : 0;
    m[a] = -INFINITY;
    l[a] = 0.0f;
  }
  Zero(o);
  const int k_end = p.q_off + q0 + rows;  // the tile's last row sees keys up to itself
  for (int k0 = StartOf(p, b, p.q_off + q0) / BC * BC; k0 < k_end; k0 += BC) {
    __syncthreads();  // the previous tile's Kt, Vn, Pt are no longer read
    LoadTile<BC, D, true>(Kt, C::ldk, KPtr(p, b, g), p.kv_stride, k0, p.seq, p.hd, 1.0f);
    LoadTile<BC, D, false>(Vn, C::ldv, VPtr(p, b, g), p.kv_stride, k0, p.seq, p.hd, 1.0f);
    __syncthreads();
    float s[C::EA][C::EB];
    Zero(s);
    Mma<C::EA, C::EB>(Qt, C::ldq, Kt, C::ldk, D, ty, tx, s);
#pragma unroll
    for (int a = 0; a < C::EA; ++a) {
      const int r = Frag<C::EA>(ty, a), i = q0 + r, pos = p.q_off + i;
      float mx = -INFINITY;
#pragma unroll
      for (int e = 0; e < C::EB; ++e) {
        const int j = k0 + Frag<C::EB>(tx, e);
        if (!(i < p.q_rows && j <= pos && j >= row_start[a])) s[a][e] = -INFINITY;
        mx = fmaxf(mx, s[a][e]);
      }
      mx = RowMax16(mx);
      const float m_new = fmaxf(m[a], mx);
      const float shift = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet
      const float alpha = __expf(m[a] - shift);
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < C::EB; ++e) {
        const float pv = __expf(s[a][e] - shift);
        Pt[Frag<C::EB>(tx, e) * C::ldp + r] = pv;
        sum += pv;
      }
      sum = RowSum16(sum);
      l[a] = l[a] * alpha + sum;
      m[a] = m_new;
#pragma unroll
      for (int c = 0; c < C::ED; ++c) o[a][c] *= alpha;
    }
    __syncthreads();
    Mma<C::EA, C::ED>(Pt, C::ldp, Vn, C::ldv, BC, ty, tx, o);
  }
#pragma unroll
  for (int a = 0; a < C::EA; ++a) {
    const int i = q0 + Frag<C::EA>(ty, a);
    if (i >= p.q_rows) continue;
    const float inv = 1.0f / l[a];
    float* dst = p.o + (static_cast<int64_t>(b) * p.q_rows + i) * p.out_stride + static_cast<int64_t>(h) * p.hd;
#pragma unroll
    for (int c = 0; c < C::ED; ++c) {
      const int d = Frag<C::ED>(tx, c);
      if (d < p.hd) dst[d] = o[a][c] * inv;
    }
    if (tx == 0) p.lse_out[(static_cast<int64_t>(b) * p.n_heads + h) * p.q_rows + i] = m[a] + logf(l[a]);
  }
}

// ---- Backward: dQ ------------------------------------------------------------
template <int D, int BR, int BC>
struct DqCfg {
  static constexpr int EA = BR / 16, EB = BC / 16, ED = D / 16;
  static constexpr int ldq = BR + kPad, ldk = BC + kPad, ldkn = D + kPad, lds = BR + kPad;
  static constexpr int q_floats = D * ldq, k_floats = D * ldk, kn_floats = BC * ldkn, s_floats = BC * lds;
  // Qt, dOt, Kt, Vt, Kn, dSt
  static constexpr size_t smem = sizeof(float) * (2 * q_floats + 2 * k_floats + kn_floats + s_floats);
};

template <int D, int BR, int BC>
__global__ void __launch_bounds__(kThreads) BwdDqKernel(Params p) {
  using C = DqCfg<D, BR, BC>;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float* Qt = sm;                    // [D][ldq] scaled q
  float* dOt = Qt + C::q_floats;     // [D][ldq]
  float* Kt = dOt + C::q_floats;     // [D][ldk]
  float* Vt = Kt + C::k_floats;      // [D][ldk]
  float* Kn = Vt + C::k_floats;      // [BC][ldkn]
  float* dSt = Kn + C::kn_floats;    // [BC][lds]
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z, g = h / p.group;
  const int rows = min(BR, p.q_rows - q0);
  const int64_t hcol = static_cast<int64_t>(h) * p.hd;

  LoadTile<BR, D, true>(Qt, C::ldq, QPtr(p, b, h), p.q_stride, q0, p.q_rows, p.hd, p.scale);
  LoadTile<BR, D, true>(dOt, C::ldq, p.dout + static_cast<int64_t>(b) * p.q_rows * p.out_stride + hcol,
                        p.out_stride, q0, p.q_rows, p.hd, 1.0f);
  int row_start[C::EA];
  float lse[C::EA], dl[C::EA], dq[C::EA][C::ED];
#pragma unroll
  for (int a = 0; a < C::EA; ++a) {
    const int i = q0 + Frag<C::EA>(ty, a);
    const int64_t li = (static_cast<int64_t>(b) * p.n_heads + h) * p.q_rows + i;
    row_start[a] = i < p.q_rows ? StartOf(p, b, p.q_off + i) : 0;
    lse[a] = i < p.q_rows ? p.lse[li] : 0.0f;
    dl[a] = i < p.q_rows ? p.delta[li] : 0.0f;
  }
  Zero(dq);
  const int k_end = p.q_off + q0 + rows;
  for (int k0 = StartOf(p, b, p.q_off + q0) / BC * BC; k0 < k_end; k0 += BC) {
    __syncthreads();
    LoadTile<BC, D, true>(Kt, C::ldk, KPtr(p, b, g), p.kv_stride, k0, p.seq, p.hd, 1.0f);
    LoadTile<BC, D, true>(Vt, C::ldk, VPtr(p, b, g), p.kv_stride, k0, p.seq, p.hd, 1.0f);
    LoadTile<BC, D, false>(Kn, C::ldkn, KPtr(p, b, g), p.kv_stride, k0, p.seq, p.hd, 1.0f);
    __syncthreads();
    float s[C::EA][C::EB], dp[C::EA][C::EB];
    Zero(s);
    Zero(dp);
    Mma<C::EA, C::EB>(Qt, C::ldq, Kt, C::ldk, D, ty, tx, s);
    Mma<C::EA, C::EB>(dOt, C::ldq, Vt, C::ldk, D, ty, tx, dp);
#pragma unroll
    for (int a = 0; a < C::EA; ++a) {
      const int r = Frag<C::EA>(ty, a), i = q0 + r, pos = p.q_off + i;
#pragma unroll
      for (int e = 0; e < C::EB; ++e) {
        const int c = Frag<C::EB>(tx, e), j = k0 + c;
        const bool ok = i < p.q_rows && j <= pos && j >= row_start[a];
        const float pv = ok ? __expf(s[a][e] - lse[a]) : 0.0f;
        dSt[c * C::lds + r] = pv * (dp[a][e] - dl[a]);
      }
    }
    __syncthreads();
    Mma<C::EA, C::ED>(dSt, C::lds, Kn, C::ldkn, BC, ty, tx, dq);
  }
  const int64_t row0 = static_cast<int64_t>(b) * p.q_rows;
#pragma unroll
  for (int a = 0; a < C::EA; ++a) {
    const int i = q0 + Frag<C::EA>(ty, a);
    if (i >= p.q_rows) continue;
    float* dst = p.dq + (row0 + i) * p.dq_stride + hcol;
#pragma unroll
    for (int c = 0; c < C::ED; ++c) {
      const int d = Frag<C::ED>(tx, c);
      if (d < p.hd) dst[d] = p.scale * dq[a][c];
    }
  }
}

// ---- Backward: dK, dV --------------------------------------------------------
template <int D, int BC, int BR>
struct DkvCfg {
  static constexpr int EK = BC / 16, EQ = BR / 16, ED = D / 16;
  static constexpr int ldk = BC + kPad, ldq = BR + kPad, ldn = D + kPad, ldp = BC + kPad;
  static constexpr int k_floats = D * ldk, q_floats = D * ldq, n_floats = BR * ldn, p_floats = BR * ldp;
  // Kt, Vt, Qt, dOt, Qn, dOn, Pn, dSn, lse, delta
  static constexpr size_t smem =
      sizeof(float) * (2 * k_floats + 2 * q_floats + 2 * n_floats + 2 * p_floats + 2 * BR);
};

template <int D, int BC, int BR>
__global__ void __launch_bounds__(kThreads) BwdDkDvKernel(Params p) {
  using C = DkvCfg<D, BC, BR>;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float* Kt = sm;                     // [D][ldk]
  float* Vt = Kt + C::k_floats;       // [D][ldk]
  float* Qt = Vt + C::k_floats;       // [D][ldq] scaled q
  float* dOt = Qt + C::q_floats;      // [D][ldq]
  float* Qn = dOt + C::q_floats;      // [BR][ldn] scaled q
  float* dOn = Qn + C::n_floats;      // [BR][ldn]
  float* Pn = dOn + C::n_floats;      // [BR][ldp]  P^T stored query-major
  float* dSn = Pn + C::p_floats;      // [BR][ldp]
  float* lse_s = dSn + C::p_floats;   // [BR]
  float* dl_s = lse_s + BR;           // [BR]
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int k0 = blockIdx.x * BC, g = blockIdx.y, b = blockIdx.z;
  const int k_last = min(k0 + BC, p.seq) - 1;

  LoadTile<BC, D, true>(Kt, C::ldk, KPtr(p, b, g), p.kv_stride, k0, p.seq, p.hd, 1.0f);
  LoadTile<BC, D, true>(Vt, C::ldk, VPtr(p, b, g), p.kv_stride, k0, p.seq, p.hd, 1.0f);
  float dk[C::EK][C::ED], dv[C::EK][C::ED];
  Zero(dk);
  Zero(dv);
  for (int h = g * p.group; h < (g + 1) * p.group; ++h) {
    const int64_t hcol = static_cast<int64_t>(h) * p.hd;
    const float* dout_b = p.dout + static_cast<int64_t>(b) * p.q_rows * p.out_stride + hcol;
    const int64_t lrow = (static_cast<int64_t>(b) * p.n_heads + h) * p.q_rows;
    // Query rows before k0's position cannot see these keys (causal).
    for (int q0 = max(0, k0 - p.q_off) / BR * BR; q0 < p.q_rows; q0 += BR) {
      if (StartOf(p, b, p.q_off + q0) > k_last) break;  // starts never decrease: no later row sees these keys
      __syncthreads();
      LoadTile<BR, D, true>(Qt, C::ldq, QPtr(p, b, h), p.q_stride, q0, p.q_rows, p.hd, p.scale);
      LoadTile<BR, D, true>(dOt, C::ldq, dout_b, p.out_stride, q0, p.q_rows, p.hd, 1.0f);
      LoadTile<BR, D, false>(Qn, C::ldn, QPtr(p, b, h), p.q_stride, q0, p.q_rows, p.hd, p.scale);
      LoadTile<BR, D, false>(dOn, C::ldn, dout_b, p.out_stride, q0, p.q_rows, p.hd, 1.0f);
      for (int r = threadIdx.x; r < BR; r += kThreads) {
        const int i = q0 + r;
        lse_s[r] = i < p.q_rows ? p.lse[lrow + i] : 0.0f;
        dl_s[r] = i < p.q_rows ? p.delta[lrow + i] : 0.0f;
      }
      __syncthreads();
      float s[C::EK][C::EQ], dp[C::EK][C::EQ];
      Zero(s);
      Zero(dp);
      Mma<C::EK, C::EQ>(Kt, C::ldk, Qt, C::ldq, D, ty, tx, s);    // S^T
      Mma<C::EK, C::EQ>(Vt, C::ldk, dOt, C::ldq, D, ty, tx, dp);  // dP^T
#pragma unroll
      for (int e = 0; e < C::EQ; ++e) {
        const int r = Frag<C::EQ>(tx, e), i = q0 + r, pos = p.q_off + i;
        const int st = i < p.q_rows ? StartOf(p, b, pos) : 0;
#pragma unroll
        for (int a = 0; a < C::EK; ++a) {
          const int c = Frag<C::EK>(ty, a), j = k0 + c;
          const bool ok = i < p.q_rows && j <= pos && j >= st;
          const float pv = ok ? __expf(s[a][e] - lse_s[r]) : 0.0f;
          Pn[r * C::ldp + c] = pv;
          dSn[r * C::ldp + c] = pv * (dp[a][e] - dl_s[r]);
        }
      }
      __syncthreads();
      Mma<C::EK, C::ED>(Pn, C::ldp, dOn, C::ldn, BR, ty, tx, dv);
      Mma<C::EK, C::ED>(dSn, C::ldp, Qn, C::ldn, BR, ty, tx, dk);
    }
  }
  const int64_t row0 = static_cast<int64_t>(b) * p.seq;
  const int64_t gcol = static_cast<int64_t>(g) * p.hd;
#pragma unroll
  for (int a = 0; a < C::EK; ++a) {
    const int j = k0 + Frag<C::EK>(ty, a);
    if (j >= p.seq) continue;
    float* krow = p.dk + (row0 + j) * p.dkv_stride + gcol;
    float* vrow = p.dv + (row0 + j) * p.dkv_stride + gcol;
#pragma unroll
    for (int c = 0; c < C::ED; ++c) {
      const int d = Frag<C::ED>(tx, c);
      if (d < p.hd) {
        krow[d] = dk[a][c];
        vrow[d] = dv[a][c];
      }
    }
  }
}

// ---- Helpers -------------------------------------------------------------------
// delta[b, h, t] = dO[b, t, h, :] . O[b, t, h, :] over the query rows t: one warp per (b, t, h).
__global__ void DeltaKernel(Params p) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t total = static_cast<int64_t>(p.batch) * p.q_rows * p.n_heads;
  if (w >= total) return;
  const int h = static_cast<int>(w % p.n_heads);
  const int64_t bt = w / p.n_heads;  // b * q_rows + t
  const float* o = p.out + bt * p.out_stride + static_cast<int64_t>(h) * p.hd;
  const float* d = p.dout + bt * p.out_stride + static_cast<int64_t>(h) * p.hd;
  float acc = 0.0f;
  for (int j = lane; j < p.hd; j += 32) acc += o[j] * d[j];
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const int64_t b = bt / p.q_rows, t = bt % p.q_rows;
    const_cast<float*>(p.delta)[(b * p.n_heads + h) * p.q_rows + t] = acc;
  }
}

template <typename Kernel>
void Launch(Kernel k, dim3 grid, size_t smem, const Params& p, Stream s, const char* what) {
  // Opting in to more than 48 KB of dynamic shared memory is per kernel; the
  // attribute is cheap to set, so it is set on every launch (thread-safe).
  cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  SHARD_CHECK_MSG(e == cudaSuccess, std::string("cuda backend: ") + what + " needs " + std::to_string(smem) +
                                        " bytes of shared memory: " + cudaGetErrorString(e));
  k<<<grid, kThreads, smem, S(s)>>>(p);
  CheckLaunch(what);
}

// The shape's fields; the rows (q/k/v and the gradients' pointers, q_off,
// q_rows and strides) are the caller's.
Params MakeParams(const AttentionShape& sh, const int32_t* start) {
  SHARD_CHECK_MSG(sh.n_kv_heads > 0 && sh.n_heads % sh.n_kv_heads == 0,
                  "attention: n_heads must be a multiple of n_kv_heads");
  SHARD_CHECK_MSG(AttentionHeadDimSupported(sh.head_dim),
                  "cuda attention: head_dim " + std::to_string(sh.head_dim) + " is not supported (at most 128)");
  Params p{};
  SetAttentionShape(sh, start, &p);
  return p;
}

// The fused layout: every position's q, k and v in one qkv row; dqkv alike.
Params FusedParams(const AttentionShape& sh, const float* qkv, float* dqkv, const int32_t* start) {
  Params p = MakeParams(sh, start);
  const int64_t hd = sh.head_dim;
  p.q = qkv;
  p.k = qkv + sh.n_heads * hd;
  p.v = qkv + (sh.n_heads + sh.n_kv_heads) * hd;
  p.q_off = 0;
  p.q_rows = p.seq;
  p.q_stride = p.kv_stride = sh.qkv_stride();
  if (dqkv) {
    p.dq = dqkv;
    p.dk = dqkv + sh.n_heads * hd;
    p.dv = dqkv + (sh.n_heads + sh.n_kv_heads) * hd;
  }
  p.dq_stride = p.dkv_stride = sh.qkv_stride();
  return p;
}

// A query chunk: q [batch*q_len, n_heads*hd], kv [batch*seq, 2*n_kv*hd]
// (key heads, then value heads); dq and dkv alike.
Params ChunkParams(const AttentionShape& sh, const AttentionChunk& c, const float* q, const float* kv, float* dq,
                   float* dkv, const int32_t* start) {
  SHARD_CHECK_MSG(c.q_offset >= 0 && c.q_len >= 0 && c.q_offset + c.q_len <= sh.seq,
                  "attention chunk [" + std::to_string(c.q_offset) + ", " + std::to_string(c.q_offset + c.q_len) +
                      ") is outside the sequence of " + std::to_string(sh.seq));
  Params p = MakeParams(sh, start);
  const int64_t kv_width = static_cast<int64_t>(sh.n_kv_heads) * sh.head_dim;
  p.q = q;
  p.k = kv;
  p.v = kv + kv_width;
  p.q_off = static_cast<int>(c.q_offset);
  p.q_rows = static_cast<int>(c.q_len);
  p.q_stride = sh.out_stride();
  p.kv_stride = 2 * kv_width;
  p.dq = dq;
  p.dk = dkv;
  p.dv = dkv ? dkv + kv_width : nullptr;
  p.dq_stride = sh.out_stride();
  p.dkv_stride = 2 * kv_width;
  return p;
}

template <int D, int BR, int BC>
void Forward(const Params& p, Stream s) {
  dim3 grid((p.q_rows + BR - 1) / BR, p.n_heads, p.batch);
  Launch(ForwardKernel<D, BR, BC>, grid, FwdCfg<D, BR, BC>::smem, p, s, "AttentionForward");
}

// dQ over the query rows; dK/dV over every key row (rows no query sees get zeros).
template <int D, int DQ_BR, int DQ_BC, int KV_BC, int KV_BR>
void Backward(const Params& p, Stream s) {
  if (p.q_rows > 0) {
    dim3 gq((p.q_rows + DQ_BR - 1) / DQ_BR, p.n_heads, p.batch);
    Launch(BwdDqKernel<D, DQ_BR, DQ_BC>, gq, DqCfg<D, DQ_BR, DQ_BC>::smem, p, s, "AttentionBackward (dQ)");
  }
  dim3 gk((p.seq + KV_BC - 1) / KV_BC, p.n_kv, p.batch);
  Launch(BwdDkDvKernel<D, KV_BC, KV_BR>, gk, DkvCfg<D, KV_BC, KV_BR>::smem, p, s, "AttentionBackward (dK, dV)");
}

void RunForward(Params p, float* out, float* lse, Stream s) {
  p.o = out;
  p.lse_out = lse;
  if (p.hd <= 32) Forward<32, 64, 64>(p, s);
  else if (p.hd <= 64) Forward<64, 64, 64>(p, s);
  else Forward<128, 64, 32>(p, s);
}

void RunBackward(Params p, const float* out, const float* lse, const float* dout, float* delta, Stream s) {
  p.out = out;
  p.lse = lse;
  p.dout = dout;
  p.delta = delta;
  const int64_t warps = static_cast<int64_t>(p.batch) * p.q_rows * p.n_heads;
  if (warps > 0) {
    DeltaKernel<<<static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, S(s)>>>(p);
    CheckLaunch("AttentionBackward (delta)");
  }
  if (p.hd <= 32) Backward<32, 64, 64, 64, 32>(p, s);
  else if (p.hd <= 64) Backward<64, 64, 32, 64, 32>(p, s);
  else Backward<128, 32, 32, 32, 16>(p, s);
}

}  // namespace

bool AttentionHeadDimSupported(int head_dim) { return head_dim > 0 && head_dim <= 128; }

void LaunchAttentionForward(const AttentionShape& sh, const float* qkv, const int32_t* segment_ids, int32_t* starts,
                            float* out, float* lse, Stream s) {
  if (sh.batch <= 0 || sh.seq <= 0) return;
  RunForward(FusedParams(sh, qkv, nullptr, LaunchAttentionSegmentStarts(sh, segment_ids, starts, s)), out, lse, s);
}

void LaunchAttentionBackward(const AttentionShape& sh, const float* qkv, const int32_t* segment_ids,
                             const float* out, const float* lse, const float* dout, float* dqkv, int32_t* starts,
                             float* delta, Stream s) {
  if (sh.batch <= 0 || sh.seq <= 0) return;
  RunBackward(FusedParams(sh, qkv, dqkv, LaunchAttentionSegmentStarts(sh, segment_ids, starts, s)), out, lse, dout,
              delta, s);
}

void LaunchAttentionChunkForward(const AttentionShape& sh, const AttentionChunk& c, const float* q, const float* kv,
                                 const int32_t* segment_ids, int32_t* starts, float* out, float* lse, Stream s) {
  if (sh.batch <= 0 || c.q_len <= 0) return;
  RunForward(ChunkParams(sh, c, q, kv, nullptr, nullptr, LaunchAttentionSegmentStarts(sh, segment_ids, starts, s)),
             out, lse, s);
}

void LaunchAttentionChunkBackward(const AttentionShape& sh, const AttentionChunk& c, const float* q, const float* kv,
                                  const int32_t* segment_ids, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dkv, int32_t* starts, float* delta, Stream s) {
  if (sh.batch <= 0 || sh.seq <= 0) return;
  RunBackward(ChunkParams(sh, c, q, kv, dq, dkv, LaunchAttentionSegmentStarts(sh, segment_ids, starts, s)), out,
              lse, dout, delta, s);
}

}  // namespace shard::cuda
