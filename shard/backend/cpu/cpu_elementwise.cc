// Memory-bound kernels: fill/add/scale, the squared-norm reduction, the
// embedding gather/scatter and SwiGLU. Each is one vectorised pass split over
// ParallelFor; the grains keep a chunk's work well above the pool's wake-up cost.
#include <algorithm>
#include <cstring>
#include <vector>

#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/backend/cpu/cpu_math.h"

namespace shard::cpu {
namespace {
constexpr int64_t kElementGrain = 1 << 15;  // floats per ParallelFor chunk, at least
}  // namespace

void Fill(float* x, int64_t n, float value) {
  ParallelFor(n, kElementGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) x[i] = value;
  });
}

void Add(const float* a, const float* b, float* out, int64_t n) {
  // Element i reads a[i], b[i] and writes out[i] only, so aliasing is safe.
  ParallelFor(n, kElementGrain, [&](int64_t s, int64_t e) {
#pragma omp simd
    for (int64_t i = s; i < e; ++i) out[i] = a[i] + b[i];
  });
}

void Scale(float* x, int64_t n, float s) {
  ParallelFor(n, kElementGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) x[i] *= s;
  });
}

void Dropout(const float* x, float* out, int64_t n, float p, uint64_t seed) {
  const float keep_scale = 1.0f / (1.0f - p);
  ParallelFor(n, kElementGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = DropoutKeep(seed, i, p) ? x[i] * keep_scale : 0.0f;
  });
}

double SumSquares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  // Fixed chunks, partials added in order: the same bits for any thread count.
  constexpr int64_t kChunk = 1 << 16;
  std::vector<double> partial(static_cast<size_t>(NumChunks(n, kChunk)));
  ForEachChunk(n, kChunk, [&](int64_t c, int64_t b, int64_t e) {
    partial[c] = SumSquaresDouble(x + b, e - b);
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void EmbeddingForward(const int32_t* tokens, int64_t rows, const float* table, DType table_dtype, int dim,
                      float* out) {
  const auto* bytes = reinterpret_cast<const char*>(table);
  const int64_t row_bytes = static_cast<int64_t>(dim) * static_cast<int64_t>(DTypeSize(table_dtype));
  ParallelFor(rows, std::max<int64_t>(1, kElementGrain / dim), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      WidenSerial(bytes + static_cast<int64_t>(tokens[r]) * row_bytes, out + r * dim, dim, table_dtype);
  });
}

void EmbeddingBackward(const int32_t* tokens, int64_t rows, const float* dout, int dim,
                       float* dtable) {
  // Repeated tokens add into the same table row, so split the columns, not the
  // rows: no two threads touch one element and each element sums in row order.
  ParallelFor(dim, 32, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = dtable + static_cast<int64_t>(tokens[r]) * dim;
      const float* src = dout + r * dim;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

// silu(g) = g * sigmoid(g); sigmoid via FastExp so the loop vectorises.
void SwiGluForward(const float* gu, int64_t rows, int ffn, float* h) {
  ParallelFor(rows, std::max<int64_t>(1, kElementGrain / ffn), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gu + r * 2 * ffn;
      const float* u = g + ffn;
      float* out = h + r * ffn;
#pragma omp simd
      for (int j = 0; j < ffn; ++j) {
        const float sig = 1.0f / (1.0f + FastExp(-g[j]));
        out[j] = g[j] * sig * u[j];
      }
    }
  });
}

void SwiGluBackward(const float* dh, const float* gu, int64_t rows, int ffn, float* dgu) {
  ParallelFor(rows, std::max<int64_t>(1, kElementGrain / ffn), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gu + r * 2 * ffn;
      const float* u = g + ffn;
      const float* d = dh + r * ffn;
      float* dg = dgu + r * 2 * ffn;
      float* du = dg + ffn;
#pragma omp simd
      for (int j = 0; j < ffn; ++j) {
        const float sig = 1.0f / (1.0f + FastExp(-g[j]));
        const float silu = g[j] * sig;
        dg[j] = d[j] * u[j] * sig * (1.0f + g[j] * (1.0f - sig));
        du[j] = d[j] * silu;
      }
    }
  });
}

}  // namespace shard::cpu
