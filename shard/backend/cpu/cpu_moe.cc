// Mixture-of-experts routing, permutation and combine (Backend::MoeRoute and
// friends): the reference implementation. Routing follows transformers'
// Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock: softmax in fp32, top-k,
// optional renormalisation. The row loops are memory-bound gathers; the
// experts' GEMMs run outside, one per expert over its contiguous rows.
#include <algorithm>
#include <cmath>
#include <vector>

#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/common/thread_pool.h"

namespace shard::cpu {

void MoeRoute(const float* logits, const MoeRouting& r) {
  const int E = r.experts, k = r.k;
  ParallelFor(r.rows, 64, [&](int64_t b, int64_t e) {
    std::vector<int> order(E);
    for (int64_t t = b; t < e; ++t) {
      const float* z = logits + t * E;
      float* p = r.probs + t * E;
      float mx = z[0];
      for (int i = 1; i < E; ++i) mx = std::max(mx, z[i]);
      double sum = 0;
      for (int i = 0; i < E; ++i) sum += (p[i] = std::exp(z[i] - mx));
      for (int i = 0; i < E; ++i) p[i] = static_cast<float>(p[i] / sum);
      for (int i = 0; i < E; ++i) order[i] = i;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int c) {
        return p[a] > p[c] || (p[a] == p[c] && a < c);
      });
      float s = 0;
      for (int j = 0; j < k; ++j) s += p[order[j]];
      for (int j = 0; j < k; ++j) {
        r.expert[t * k + j] = order[j];
        r.weight[t * k + j] = r.renormalize ? p[order[j]] / s : p[order[j]];
      }
    }
  });
  // Counting sort of the assignments by expert (stable: row order within an expert).
  std::fill(r.offsets, r.offsets + E + 1, 0);
  const int64_t n = r.rows * k;
  for (int64_t a = 0; a < n; ++a) ++r.offsets[r.expert[a] + 1];
  for (int i = 0; i < E; ++i) r.offsets[i + 1] += r.offsets[i];
  std::vector<int32_t> next(r.offsets, r.offsets + E);
  for (int64_t a = 0; a < n; ++a) r.perm[next[r.expert[a]]++] = static_cast<int32_t>(a);
}

void MoeRouteBackward(const MoeRouting& r, const float* d_weight, const float* d_probs, float* d_logits) {
  const int E = r.experts, k = r.k;
  ParallelFor(r.rows, 64, [&](int64_t b, int64_t e) {
    std::vector<double> dp(E);
    for (int64_t t = b; t < e; ++t) {
      const float* p = r.probs + t * E;
      const int32_t* ex = r.expert + t * k;
      const float* w = r.weight + t * k;
      const float* dw = d_weight + t * k;
      for (int i = 0; i < E; ++i) dp[i] = d_probs ? d_probs[t * E + i] : 0.0;
      // w_j = s_j / S (S = Σ s): ds_j = (dw_j - Σ_i dw_i w_i) / S; without renormalisation ds = dw.
      double s = 0, dot = 0;
      for (int j = 0; j < k; ++j) s += p[ex[j]], dot += static_cast<double>(dw[j]) * w[j];
      for (int j = 0; j < k; ++j) dp[ex[j]] += r.renormalize ? (dw[j] - dot) / s : dw[j];
      double pdp = 0;
      for (int i = 0; i < E; ++i) pdp += p[i] * dp[i];
      for (int i = 0; i < E; ++i) d_logits[t * E + i] = static_cast<float>(p[i] * (dp[i] - pdp));
    }
  });
}

void MoePermute(const float* x, const int32_t* perm, int64_t n, int k, int64_t dim, float* out) {
  ParallelFor(n, 16, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) std::copy_n(x + (perm[p] / k) * dim, dim, out + p * dim);
  });
}

void MoeUnpermute(const float* y, const int32_t* perm, const float* weight, int64_t n, int k, int64_t dim,
                  float* out) {
  // Parallel over tokens through the inverse permutation; each token adds its
  // k rows in slot order, so the sums do not depend on the thread count.
  std::vector<int32_t> pos(n);
  for (int64_t p = 0; p < n; ++p) pos[perm[p]] = static_cast<int32_t>(p);
  ParallelFor(n / k, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* o = out + t * dim;
      for (int s = 0; s < k; ++s) {
        const int64_t a = t * k + s;
        const float w = weight ? weight[a] : 1.0f;
        const float* src = y + pos[a] * dim;
        for (int64_t i = 0; i < dim; ++i) o[i] += w * src[i];
      }
    }
  });
}

void MoeUnpermuteBackward(const float* dout, const float* y, const int32_t* perm, const float* weight, int64_t n,
                          int k, int64_t dim, float* dy, float* d_weight) {
  ParallelFor(n, 16, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* g = dout + (perm[p] / k) * dim;
      const float* src = y + p * dim;
      const float w = weight[perm[p]];
      double dot = 0;
      for (int64_t i = 0; i < dim; ++i) {
        dot += static_cast<double>(g[i]) * src[i];
        dy[p * dim + i] = w * g[i];
      }
      d_weight[perm[p]] = static_cast<float>(dot);
    }
  });
}

}  // namespace shard::cpu
