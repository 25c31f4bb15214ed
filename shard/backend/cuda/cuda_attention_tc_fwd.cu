// Tensor-core attention, forward: S = Q K^T, the online softmax and O += P V
// per key tile (see cuda_attention_tc.cuh for the design); also the support
// check and the shared MakeParams.
#include <cmath>
#include <string>

#include "shard/backend/cuda/cuda_attention_shape.cuh"
#include "shard/backend/cuda/cuda_attention_tc.cuh"

namespace shard::cuda {
namespace tc {
namespace {

// ---- Forward -------------------------------------------------------------------
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

template <typename T, int D>
void Forward(const Params& p, Stream s) {
  using X = Tiles<T, D>;
  dim3 grid((p.seq + X::kFwdBr - 1) / X::kFwdBr, p.n_heads, p.batch);
  Launch(ForwardTcKernel<T, D, X::kFwdBr, X::kFwdBc>, grid, X::Fwd::kThreads, X::Fwd::smem, p, s,
         "AttentionForward (tensor cores)");
}

}  // namespace

Params MakeParams(const AttentionShape& sh, const float* qkv, const int32_t* start) {
  SHARD_CHECK_MSG(AttentionTcSupported(sh), "cuda attention (tensor cores): unsupported shape or device (head_dim " +
                                                std::to_string(sh.head_dim) + ", compute " + DTypeName(sh.compute) +
                                                "); check AttentionTcSupported first");
  Params p{};
  SetAttentionShape(sh, start, &p);
  p.qkv = qkv;
  p.qkv_stride = sh.qkv_stride();  // both strides are multiples of 16 floats (head_dim % 16 == 0)
  p.vec = Aligned16(qkv);
  return p;
}

}  // namespace tc

using namespace tc;

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

}  // namespace shard::cuda
