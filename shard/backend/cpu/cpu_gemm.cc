// Matrix products: Gemm goes to single-threaded OpenBLAS calls, one per
// compute thread on a slice of C (never called from a ParallelFor task);
// SmallGemm is a register-tiled kernel for the small, strided products inside
// attention, which run one task per thread.
//
// Why slice C ourselves instead of letting OpenBLAS thread: its pthreads
// server spins in sched_yield between calls and fights the compute pool for
// the same cores (perf on the bench model: ~18% of all cycles in
// sched_yield). One pool that sleeps when idle wastes nothing.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "shard/common/thread_pool.h"

#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/backend/cpu/cpu_math.h"

namespace shard::cpu {
namespace {

// C[i0:i1, j0:j1] of the product, as one single-threaded BLAS call.
void SgemmSlice(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  // Row i of op(A): A[i,:] when not transposed, column i of A[k, m] otherwise.
  const float* a = g.trans_a ? g.a + i0 : g.a + i0 * g.lda;
  // Column j of op(B): B[:, j] when not transposed, row j of B[n, k] otherwise.
  const float* b = g.trans_b ? g.b + j0 * g.ldb : g.b + j0;
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
              g.trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(i1 - i0),
              static_cast<blasint>(j1 - j0), static_cast<blasint>(g.k), g.alpha, a,
              static_cast<blasint>(g.lda), b, static_cast<blasint>(g.ldb), g.beta,
              g.c + i0 * g.ldc + j0, static_cast<blasint>(g.ldc));
}

}  // namespace

void Gemm(const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return;
  CheckStoredB(g);
  if ((g.compute != DType::kF32 || g.b_dtype != DType::kF32) && g.k > 0) {
    // Two-byte inputs: round copies of A and B (each span keeps its leading
    // dimension), then the fp32 product of the rounded values — what tensor
    // cores compute, up to summation order. A two-byte B is widened exactly
    // (rounding it to its own type would change nothing).
    static thread_local std::vector<float> ra, rb;
    const int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
    const int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
    const int64_t a_span = (a_rows - 1) * g.lda + a_cols, b_span = (b_rows - 1) * g.ldb + b_cols;
    GemmArgs r = g;
    if (g.compute != DType::kF32) {
      ra.resize(static_cast<size_t>(a_span));
      RoundThrough(g.a, ra.data(), a_span, g.compute);
      r.a = ra.data();
    }
    rb.resize(static_cast<size_t>(b_span));
    if (g.b_dtype != DType::kF32) {
      CastToF32(g.b, rb.data(), b_span, g.b_dtype);
    } else {
      RoundThrough(g.b, rb.data(), b_span, g.compute);
    }
    r.compute = DType::kF32;
    r.b_dtype = DType::kF32;
    r.b = rb.data();
    Gemm(r);
    return;
  }
  if (g.k <= 0) {
    // BLAS rejects k == 0 with leading dimensions of 0; the result is beta * C.
    for (int64_t i = 0; i < g.m; ++i) {
      float* c = g.c + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) c[j] = g.beta == 0.0f ? 0.0f : g.beta * c[j];
    }
    return;
  }
  static std::once_flag single_threaded_blas;
  std::call_once(single_threaded_blas, [] { openblas_set_num_threads(1); });

  const int threads = NumComputeThreads();
  // Below ~4 MFLOP a second thread costs more in wake-up and packing than it saves.
  const bool split = threads > 1 && 2.0 * g.m * g.n * g.k >= 4e6;
  if (!split) {
    SgemmSlice(g, 0, g.m, 0, g.n);
    return;
  }
  // Slice the longer side of C, in multiples of 16 so every slice keeps whole
  // micro-tiles.
  const bool by_rows = g.m >= g.n;
  const int64_t extent = by_rows ? g.m : g.n;
  const int64_t chunk = std::max<int64_t>(16, (extent / threads + 15) / 16 * 16);
  const int64_t n_chunks = (extent + chunk - 1) / chunk;
  ParallelFor(n_chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t lo = c * chunk, hi = std::min(extent, lo + chunk);
      if (by_rows) {
        SgemmSlice(g, lo, hi, 0, g.n);
      } else {
        SgemmSlice(g, 0, g.m, lo, hi);
      }
    }
  });
}

namespace {

// C[MR, 8*NV] (+)= A(MR, k) * B[k, 8*NV], accumulators in registers (6x16 is
// the classic AVX2 shape: 12 accumulators + 2 B vectors + 1 broadcast fit the
// 16 ymm registers).
template <int MR, int NV>
void MicroKernel(int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  V8 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = accumulate ? LoadV8(c + i * ldc + 8 * j) : V8{};
  for (int64_t p = 0; p < k; ++p) {
    V8 bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = LoadV8(b + p * ldb + 8 * j);
    const float* ap = a + p * a_cs;
    for (int i = 0; i < MR; ++i) {
      const float av = ap[i * a_rs];
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) StoreV8(c + i * ldc + 8 * j, acc[i][j]);
}

template <int MR>
void RowBlock(int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
              int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) MicroKernel<MR, 2>(k, a, a_rs, a_cs, b + j, ldb, c + j, ldc, accumulate);
  if (j < n) MicroKernel<MR, 1>(k, a, a_rs, a_cs, b + j, ldb, c + j, ldc, accumulate);
}

}  // namespace

void SmallGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
               const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  SHARD_CHECK_MSG(n % 8 == 0, "SmallGemm needs n to be a multiple of 8 (pad the buffers)");
  constexpr int64_t kRows = 6;
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows)
    RowBlock<kRows>(n, k, a + i * a_rs, a_rs, a_cs, b, ldb, c + i * ldc, ldc, accumulate);
  const float* ai = a + i * a_rs;
  float* ci = c + i * ldc;
  switch (m - i) {
    case 5: RowBlock<5>(n, k, ai, a_rs, a_cs, b, ldb, ci, ldc, accumulate); break;
    case 4: RowBlock<4>(n, k, ai, a_rs, a_cs, b, ldb, ci, ldc, accumulate); break;
    case 3: RowBlock<3>(n, k, ai, a_rs, a_cs, b, ldb, ci, ldc, accumulate); break;
    case 2: RowBlock<2>(n, k, ai, a_rs, a_cs, b, ldb, ci, ldc, accumulate); break;
    case 1: RowBlock<1>(n, k, ai, a_rs, a_cs, b, ldb, ci, ldc, accumulate); break;
    default: break;
  }
}

}  // namespace shard::cpu
