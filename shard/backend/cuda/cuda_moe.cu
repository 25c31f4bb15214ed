// Mixture-of-experts routing, permutation and combine on the GPU (the CUDA
// side of Backend::MoeRoute and friends; shard/backend/cpu/cpu_moe.cc is the
// reference they are tested against). Routing: one thread per token row
// (softmax in fp32 with a double sum, top-k by repeated selection: ties go to
// the lower expert, as the CPU's partial_sort with index order). Grouping by
// expert is a stable counting sort in three small kernels (count per expert,
// prefix, scatter in row order: one thread per expert scanning the
// assignments, O(E·rows·k), simple rather than fast). The combine runs per
// token over its k rows in slot order through the inverse permutation, so its
// sums are deterministic, like the CPU's. The experts' GEMMs run outside
// (per-expert cuBLASLt calls over contiguous rows, shard/model/moe_mlp.cc).
#include "shard/backend/cuda/cuda_kernel_util.cuh"

namespace shard::cuda {
namespace {

__global__ void MoeRouteRowsKernel(const float* logits, int64_t rows, int E, int k, bool renorm, float* probs,
                                   int32_t* expert, float* weight) {
  GRID_STRIDE(t, rows) {
    const float* z = logits + t * E;
    float* p = probs + t * E;
    float mx = z[0];
    for (int i = 1; i < E; ++i) mx = fmaxf(mx, z[i]);
    double sum = 0;
    for (int i = 0; i < E; ++i) {
      const float ex = expf(z[i] - mx);
      p[i] = ex;
      sum += ex;
    }
    for (int i = 0; i < E; ++i) p[i] = static_cast<float>(p[i] / sum);
    float s = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int i = 0; i < E; ++i) {
        bool taken = false;
        for (int q = 0; q < j; ++q) taken |= expert[t * k + q] == i;
        if (!taken && (best < 0 || p[i] > p[best])) best = i;  // strict: ties keep the lower expert
      }
      expert[t * k + j] = best;
      s += p[best];
    }
    for (int j = 0; j < k; ++j) {
      const float pj = p[expert[t * k + j]];
      weight[t * k + j] = renorm ? pj / s : pj;
    }
  }
}

__global__ void MoeCountKernel(const int32_t* expert, int64_t n, int E, int32_t* offsets) {
  GRID_STRIDE(e, E) {
    int32_t c = 0;
    for (int64_t a = 0; a < n; ++a) c += expert[a] == e;
    offsets[e + 1] = c;
  }
}

__global__ void MoePrefixKernel(int E, int32_t* offsets) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  offsets[0] = 0;
  for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
}

__global__ void MoeScatterKernel(const int32_t* expert, int64_t n, int E, const int32_t* offsets, int32_t* perm) {
  GRID_STRIDE(e, E) {
    int32_t next = offsets[e];
    for (int64_t a = 0; a < n; ++a)
      if (expert[a] == e) perm[next++] = static_cast<int32_t>(a);
  }
}

__global__ void MoeRouteBackwardKernel(int64_t rows, int E, int k, bool renorm, const float* probs,
                                       const int32_t* expert, const float* weight, const float* d_weight,
                                       const float* d_probs, float* d_logits) {
  GRID_STRIDE(t, rows) {
    const float* p = probs + t * E;
    const int32_t* ex = expert + t * k;
    const float* w = weight + t * k;
    const float* dw = d_weight + t * k;
    double s = 0, dot = 0;
    for (int j = 0; j < k; ++j) s += p[ex[j]], dot += static_cast<double>(dw[j]) * w[j];
    // dp_i = d_probs_i + the selected slots' share (as the CPU's dp array).
    auto dp = [&](int i) {
      double v = d_probs ? d_probs[t * E + i] : 0.0;
      for (int j = 0; j < k; ++j)
        if (ex[j] == i) v += renorm ? (dw[j] - dot) / s : dw[j];
      return v;
    };
    double pdp = 0;
    for (int i = 0; i < E; ++i) pdp += p[i] * dp(i);
    for (int i = 0; i < E; ++i) d_logits[t * E + i] = static_cast<float>(p[i] * (dp(i) - pdp));
  }
}

__global__ void MoePermuteKernel(const float* x, const int32_t* perm, int64_t n, int k, int64_t dim, float* out) {
  GRID_STRIDE(i, n * dim) {
    const int64_t p = i / dim, c = i % dim;
    out[i] = x[(perm[p] / k) * dim + c];
  }
}

__global__ void MoeInverseKernel(const int32_t* perm, int64_t n, int32_t* pos) {
  GRID_STRIDE(p, n) { pos[perm[p]] = static_cast<int32_t>(p); }
}

__global__ void MoeUnpermuteKernel(const float* y, const int32_t* pos, const float* weight, int64_t tokens, int k,
                                   int64_t dim, float* out) {
  GRID_STRIDE(i, tokens * dim) {
    const int64_t t = i / dim, c = i % dim;
    float o = out[i];
    for (int s = 0; s < k; ++s) {
      const int64_t a = t * k + s;
      o += (weight ? weight[a] : 1.0f) * y[static_cast<int64_t>(pos[a]) * dim + c];
    }
    out[i] = o;
  }
}

// One block per assignment row p: dy[p] = w · dout[token], d_weight = dot(dout[token], y[p]).
__global__ void MoeUnpermuteBackwardKernel(const float* dout, const float* y, const int32_t* perm, const float* weight,
                                           int k, int64_t dim, float* dy, float* d_weight) {
  const int64_t p = blockIdx.x;
  const int32_t a = perm[p];
  const float* g = dout + static_cast<int64_t>(a / k) * dim;
  const float* src = y + p * dim;
  const float w = weight[a];
  double dot = 0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    dot += static_cast<double>(g[i]) * src[i];
    dy[p * dim + i] = w * g[i];
  }
  dot = BlockSum(dot);
  if (threadIdx.x == 0) d_weight[a] = static_cast<float>(dot);
}

}  // namespace

void LaunchMoeRoute(const float* logits, const MoeRouting& r, Stream s) {
  const int64_t n = r.rows * r.k;
  if (r.rows > 0)
    MoeRouteRowsKernel<<<GridFor(r.rows, 128), 128, 0, S(s)>>>(logits, r.rows, r.experts, r.k, r.renormalize, r.probs,
                                                                r.expert, r.weight);
  MoeCountKernel<<<GridFor(r.experts, 128), 128, 0, S(s)>>>(r.expert, n, r.experts, r.offsets);
  MoePrefixKernel<<<1, 1, 0, S(s)>>>(r.experts, r.offsets);
  MoeScatterKernel<<<GridFor(r.experts, 128), 128, 0, S(s)>>>(r.expert, n, r.experts, r.offsets, r.perm);
  CheckLaunch("MoeRoute");
}

void LaunchMoeRouteBackward(const MoeRouting& r, const float* d_weight, const float* d_probs, float* d_logits,
                            Stream s) {
  if (r.rows <= 0) return;
  MoeRouteBackwardKernel<<<GridFor(r.rows, 128), 128, 0, S(s)>>>(r.rows, r.experts, r.k, r.renormalize, r.probs,
                                                                  r.expert, r.weight, d_weight, d_probs, d_logits);
  CheckLaunch("MoeRouteBackward");
}

void LaunchMoePermute(const float* x, const int32_t* perm, int64_t n, int k, int64_t dim, float* out, Stream s) {
  if (n * dim <= 0) return;
  MoePermuteKernel<<<GridFor(n * dim), kThreads, 0, S(s)>>>(x, perm, n, k, dim, out);
  CheckLaunch("MoePermute");
}

void LaunchMoeUnpermute(const float* y, const int32_t* perm, const float* weight, int64_t n, int k, int64_t dim,
                        float* out, int32_t* pos_scratch, Stream s) {
  if (n * dim <= 0) return;
  MoeInverseKernel<<<GridFor(n), kThreads, 0, S(s)>>>(perm, n, pos_scratch);
  MoeUnpermuteKernel<<<GridFor((n / k) * dim), kThreads, 0, S(s)>>>(y, pos_scratch, weight, n / k, k, dim, out);
  CheckLaunch("MoeUnpermute");
}

void LaunchMoeUnpermuteBackward(const float* dout, const float* y, const int32_t* perm, const float* weight, int64_t n,
                                int k, int64_t dim, float* dy, float* d_weight, Stream s) {
  if (n <= 0) return;
  MoeUnpermuteBackwardKernel<<<static_cast<unsigned>(n), kThreads, 0, S(s)>>>(dout, y, perm, weight, k, dim, dy,
                                                                             d_weight);
  CheckLaunch("MoeUnpermuteBackward");
}

}  // namespace shard::cuda
