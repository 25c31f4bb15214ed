// Test-only, naive double-precision references for the Backend ops (forward
// only): plain loops that follow backend.h's definitions literally, for
// comparing backends and for finite-difference gradient checks. Slow by design.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "shard/backend/backend.h"

namespace shard::ref {

// C[m,n] = alpha * op(A) * op(B) + beta * C, row-major with leading dims.
inline void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                 const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
                 int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = trans_a ? a[p * lda + i] : a[i * lda + p];
        const double bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      c[i * ldc + j] = alpha * acc + beta * c[i * ldc + j];
    }
  }
}

inline void Embedding(const int32_t* tokens, int64_t rows, const double* table, int dim, double* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < dim; ++j) out[r * dim + j] = table[static_cast<int64_t>(tokens[r]) * dim + j];
}

inline void RmsNorm(const double* x, const double* w, int64_t rows, int dim, double eps, double* y,
                    double* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int j = 0; j < dim; ++j) ss += x[r * dim + j] * x[r * dim + j];
    const double rs = 1.0 / std::sqrt(ss / dim + eps);
    if (rstd) rstd[r] = rs;
    for (int j = 0; j < dim; ++j) y[r * dim + j] = x[r * dim + j] * rs * w[j];
  }
}

// In place, HF rotate-half; inverse rotates by the negated angle.
inline void Rope(double* x, int64_t rows, int64_t row_stride, int n_heads, int head_dim,
                 const int32_t* pos, const double* cos_sin, bool inverse) {
  const int half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const double* cs = cos_sin + static_cast<int64_t>(pos[r]) * head_dim;
    for (int h = 0; h < n_heads; ++h) {
      double* xh = x + r * row_stride + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double c = cs[i], s = inverse ? -cs[half + i] : cs[half + i];
        const double lo = xh[i], hi = xh[i + half];
        xh[i] = lo * c - hi * s;
        xh[i + half] = hi * c + lo * s;
      }
    }
  }
}

// Causal GQA attention on fused qkv; token i attends to j <= i of the same
// sequence with segment_ids[j] == segment_ids[i] (all j <= i when null).
inline void Attention(const AttentionShape& s, const double* qkv, const int32_t* segment_ids,
                      double* out, double* lse) {
  const int64_t qs = s.qkv_stride(), os = s.out_stride();
  const int group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> sc(static_cast<size_t>(s.seq));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int h = 0; h < s.n_heads; ++h) {
      const int g = h / group;
      for (int64_t i = 0; i < s.seq; ++i) {
        const int64_t ri = b * s.seq + i;
        const double* q = qkv + ri * qs + static_cast<int64_t>(h) * hd;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t rj = b * s.seq + j;
          if (segment_ids && segment_ids[rj] != segment_ids[ri]) continue;
          const double* k = qkv + rj * qs + static_cast<int64_t>(s.n_heads + g) * hd;
          double dot = 0.0;
          for (int d = 0; d < hd; ++d) dot += q[d] * k[d];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          if (segment_ids && segment_ids[b * s.seq + j] != segment_ids[ri]) continue;
          sum += std::exp(sc[j] - mx);
        }
        double* o = out + ri * os + static_cast<int64_t>(h) * hd;
        for (int d = 0; d < hd; ++d) o[d] = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t rj = b * s.seq + j;
          if (segment_ids && segment_ids[rj] != segment_ids[ri]) continue;
          const double p = std::exp(sc[j] - mx) / sum;
          const double* v = qkv + rj * qs + static_cast<int64_t>(s.n_heads + s.n_kv_heads + g) * hd;
          for (int d = 0; d < hd; ++d) o[d] += p * v[d];
        }
        if (lse) lse[(b * s.n_heads + h) * s.seq + i] = mx + std::log(sum);
      }
    }
  }
}

// h = silu(gate) * up with gu = [gate | up].
inline void SwiGlu(const double* gu, int64_t rows, int ffn, double* h) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < ffn; ++j) {
      const double g = gu[r * 2 * ffn + j], u = gu[r * 2 * ffn + ffn + j];
      h[r * ffn + j] = g / (1.0 + std::exp(-g)) * u;
    }
  }
}

// Sum over rows with target >= 0 of -log softmax(logits)[target].
inline double CrossEntropy(const double* logits, const int32_t* targets, int64_t rows, int vocab) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0) continue;
    const double* x = logits + r * vocab;
    const double mx = *std::max_element(x, x + vocab);
    double sum = 0.0;
    for (int j = 0; j < vocab; ++j) sum += std::exp(x[j] - mx);
    total += std::log(sum) + mx - x[targets[r]];
  }
  return total;
}

// One torch.optim.AdamW step, in double.
inline void AdamW(double* param, const double* grad, double* m, double* v, int64_t n,
                  const AdamWArgs& a) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step));
  for (int64_t i = 0; i < n; ++i) {
    const double g = grad[i] * a.grad_scale;
    param[i] *= 1.0 - static_cast<double>(a.lr) * a.weight_decay;
    m[i] = a.beta1 * m[i] + (1.0 - a.beta1) * g;
    v[i] = a.beta2 * v[i] + (1.0 - a.beta2) * g * g;
    const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + a.eps;
    param[i] -= a.lr / bc1 * m[i] / denom;
  }
}

}  // namespace shard::ref
