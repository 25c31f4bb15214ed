// Internal to shard/backend/cpu: small numeric building blocks shared by the
// kernels (vector type, branch-free exp, per-thread scratch, fixed chunking).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>

#include "shard/common/status.h"
#include "shard/common/thread_pool.h"

namespace shard::cpu {

// Eight floats. GCC vector extensions rather than intrinsics so the code still
// compiles (as two SSE halves) when SHARDD_NATIVE is off; with -march=native it
// is one AVX register and `c += a * b` becomes an FMA.
typedef float V8 __attribute__((vector_size(32)));

inline V8 LoadV8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}
inline void StoreV8(float* p, V8 v) { std::memcpy(p, &v, sizeof v); }

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// exp(x) with max relative error ~1e-7 (Cephes expf polynomial), written without
// branches or libm calls so that `#pragma omp simd` loops around it vectorise;
// std::exp does not vectorise without -ffast-math. NaN propagates (the clamps
// keep NaN); results below ~1.2e-38 are clamped to that instead of 0.
inline float FastExp(float x) {
  x = std::max(x, -87.3f);  // keeps the exponent >= 1 (normal numbers)
  x = std::min(x, 88.0f);   // keeps the exponent <= 254
  // Round to nearest with the 1.5*2^23 trick (vectorises everywhere, unlike floor).
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  // r = x - n*ln2 in two parts so r stays exact enough for the polynomial.
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  return p * std::bit_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(e) << 23));
}

// max(x[0, n)), vectorised by hand: GCC leaves `omp simd reduction(max)` on
// floats scalar, and a scalar max chain is latency-bound. NaNs are skipped here;
// callers exponentiate x - max afterwards, which turns a NaN input into NaN.
inline float MaxOf(const float* x, int64_t n) {
  float m = -__builtin_inff();
  int64_t j = 0;
  if (n >= 16) {
    V8 a = LoadV8(x), b = LoadV8(x + 8);
    for (j = 16; j + 16 <= n; j += 16) {
      const V8 u = LoadV8(x + j), w = LoadV8(x + j + 8);
      a = u > a ? u : a;
      b = w > b ? w : b;
    }
    a = b > a ? b : a;
    for (int i = 0; i < 8; ++i) m = a[i] > m ? a[i] : m;
  }
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// out[j] = exp(in[j] - shift) for j in [0, n) (out may be in); returns the sum,
// in float within blocks of 512 (vectorises) and in double across blocks.
inline double ExpShiftSum(const float* in, float* out, int64_t n, float shift) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += 512) {
    const int64_t e = std::min(n, b + 512);
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = b; j < e; ++j) {
      const float v = FastExp(in[j] - shift);
      out[j] = v;
      s += v;
    }
    total += s;
  }
  return total;
}

// sum of x[i]^2 and of a[i]*b[i]*c[i], accumulated in double. Kept out of the
// ParallelFor lambdas: inside them GCC vectorises the float->double loads as
// gathers (several times slower).
inline double SumSquaresDouble(const float* x, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    acc += v * v;
  }
  return acc;
}
inline double Dot3Double(const float* a, const float* b, const float* c, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i] * c[i];
  return acc;
}

// Prefetches the cache lines of n floats at p (rows read with a large stride
// defeat the hardware prefetcher; attention packs and unpacks such rows).
inline void PrefetchFloats(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(p + i);
  __builtin_prefetch(p + n - 1);
}
inline void PrefetchFloatsForWrite(float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 1);
  __builtin_prefetch(p + n - 1, 1);
}

// A per-thread, 64-byte aligned, grow-only float buffer. ParallelFor workers
// live for the whole process, so kernels allocate once instead of per call.
// Not reentrant: one kernel at a time per thread may hold it.
inline float* ThreadScratch(size_t n_floats) {
  struct Buffer {
    float* data = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buf;
  if (buf.size < n_floats) {
    std::free(buf.data);
    const size_t bytes = static_cast<size_t>(RoundUp(static_cast<int64_t>(n_floats) * 4, 64));
    buf.data = static_cast<float*>(std::aligned_alloc(64, bytes));
    SHARD_CHECK_MSG(buf.data != nullptr, "cpu backend: out of memory for kernel scratch");
    buf.size = n_floats;
  }
  return buf.data;
}

// Carves 64-byte aligned sub-buffers out of one scratch block.
class ScratchCarver {
 public:
  explicit ScratchCarver(float* base) : next_(base) {}
  float* Take(int64_t n_floats) {
    float* p = next_;
    next_ += RoundUp(n_floats, 16);
    return p;
  }
  // Floats needed for a sequence of Take() calls of these sizes.
  static int64_t Size(std::initializer_list<int64_t> sizes) {
    int64_t total = 0;
    for (int64_t s : sizes) total += RoundUp(s, 16);
    return total;
  }

 private:
  float* next_;
};

// Runs fn(chunk, begin, end) for [0, n) cut into chunks of `chunk_size` items.
// The cut does not depend on the thread count, so reductions that combine
// per-chunk partials in chunk order are bitwise reproducible everywhere.
inline int64_t NumChunks(int64_t n, int64_t chunk_size) { return (n + chunk_size - 1) / chunk_size; }
inline void ForEachChunk(int64_t n, int64_t chunk_size,
                         const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  const int64_t chunks = NumChunks(n, chunk_size);
  ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) fn(c, c * chunk_size, std::min(n, (c + 1) * chunk_size));
  });
}

}  // namespace shard::cpu
