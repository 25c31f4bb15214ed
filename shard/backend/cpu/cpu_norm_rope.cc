// RMSNorm and rotary position embedding: row-local kernels, parallel over rows.
#include <algorithm>
#include <cmath>
#include <vector>

#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/backend/cpu/cpu_math.h"

namespace shard::cpu {
namespace {
constexpr int64_t kElementGrain = 1 << 14;  // floats per ParallelFor chunk, at least
// dw sums over rows in fixed chunks (partials added in chunk order), so the
// result does not depend on the thread count.
constexpr int64_t kNormChunkRows = 64;

int64_t RowGrain(int64_t row_floats) { return std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, row_floats)); }
}  // namespace

void RmsNormForward(const float* x, const float* w, int64_t rows, int dim, float eps, float* y,
                    float* rstd) {
  ParallelFor(rows, RowGrain(dim), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      const double ss = SumSquaresDouble(xr, dim);  // double: no drift for wide rows
      const float rs = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
      rstd[r] = rs;
#pragma omp simd
      for (int j = 0; j < dim; ++j) yr[j] = xr[j] * rs * w[j];
    }
  });
}

// y_j = x_j r w_j with r = (mean(x^2) + eps)^-1/2 and dr/dx_k = -r^3 x_k / dim, so
// dx_k = r dy_k w_k - x_k r^3 (sum_j dy_j w_j x_j) / dim and dw_j += dy_j x_j r.
void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd,
                     int64_t rows, int dim, float* dx, float* dw) {
  if (rows <= 0) return;
  const int64_t chunks = NumChunks(rows, kNormChunkRows);
  std::vector<float> partial(static_cast<size_t>(chunks * dim), 0.0f);
  ForEachChunk(rows, kNormChunkRows, [&](int64_t c, int64_t b, int64_t e) {
    float* pw = partial.data() + c * dim;
    for (int64_t r = b; r < e; ++r) {
      const float* dyr = dy + r * dim;
      const float* xr = x + r * dim;
      float* dxr = dx + r * dim;
      const float rs = rstd[r];
      const double dot = Dot3Double(dyr, w, xr, dim);
      const float coef = static_cast<float>(static_cast<double>(rs) * rs * rs * dot / dim);
#pragma omp simd
      for (int j = 0; j < dim; ++j) {
        dxr[j] = rs * dyr[j] * w[j] - xr[j] * coef;
        pw[j] += dyr[j] * xr[j] * rs;
      }
    }
  });
  ParallelFor(dim, 64, [&](int64_t j0, int64_t j1) {
    for (int64_t c = 0; c < chunks; ++c) {
      const float* pw = partial.data() + c * dim;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) dw[j] += pw[j];
    }
  });
}

// HF rotate-half: pair (i, i + half) rotates by the angle of column i; the
// inverse (the backward pass) rotates by minus that angle.
void Rope(float* x, int64_t rows, int64_t row_stride, int n_heads, int head_dim,
          const int32_t* pos, const float* cos_sin, bool inverse) {
  const int half = head_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  ParallelFor(rows, RowGrain(static_cast<int64_t>(n_heads) * head_dim), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* cs = cos_sin + static_cast<int64_t>(pos[r]) * head_dim;
      for (int h = 0; h < n_heads; ++h) {
        float* xh = x + r * row_stride + static_cast<int64_t>(h) * head_dim;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const float c = cs[i], s = sign * cs[half + i];
          const float lo = xh[i], hi = xh[i + half];
          xh[i] = lo * c - hi * s;
          xh[i + half] = hi * c + lo * s;
        }
      }
    }
  });
}

}  // namespace shard::cpu
