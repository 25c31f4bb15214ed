// Tensor-core attention, backward: delta = rowsum(round(dO) O), then dQ per
// query tile and dK, dV per key tile of each kv head, without atomics (see
// cuda_attention_tc.cuh for the design).
#include <cstdint>

#include "shard/backend/cuda/cuda_attention_tc.cuh"

namespace shard::cuda {
namespace tc {
namespace {

// ---- Backward: dQ ----------------------------------------------------------------
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

}  // namespace
}  // namespace tc

using namespace tc;

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
