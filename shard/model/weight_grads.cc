#include "shard/model/weight_grads.h"

#include <algorithm>

namespace shard {

int64_t WeightGradChunkRows(int64_t in, int64_t scratch_elems) {
  return std::max<int64_t>(8, scratch_elems / std::max<int64_t>(in, 1) / 8 * 8);
}

void WeightGrad(Backend* be, DType compute, const WeightGrads& g, int64_t offset, const float* x, const float* dy,
                int64_t n, int64_t in, int64_t out, float* scratch, int64_t scratch_elems) {
  if (g.frozen()) return;
  GemmArgs gw;
  gw.compute = compute;
  gw.trans_a = true;
  gw.n = in, gw.k = n;
  gw.lda = out;
  gw.b = x, gw.ldb = in;
  gw.ldc = in;
  if (g.f32) {
    gw.m = out;
    gw.a = dy;
    gw.beta = 1.0f;
    gw.c = g.f32 + offset;
    be->Gemm(gw);
    return;
  }
  const int64_t rows = WeightGradChunkRows(in, scratch_elems);
  char* dst = static_cast<char*>(g.lp) + offset * static_cast<int64_t>(DTypeSize(g.dt));
  for (int64_t r0 = 0; r0 < out; r0 += rows) {
    gw.m = std::min(rows, out - r0);
    gw.a = dy + r0;  // columns r0.. of dy: rows r0.. of dy^T
    gw.beta = 0.0f;
    gw.c = scratch;
    be->Gemm(gw);
    be->CastFromF32(scratch, dst + r0 * in * static_cast<int64_t>(DTypeSize(g.dt)), gw.m * in, g.dt);
  }
}

void NormBackward(Backend* be, const WeightGrads& g, int64_t offset, const float* dy, const float* x, const float* w,
                  const float* rstd, int64_t rows, int dim, float* dx, float* scratch, float* sink) {
  if (!g.lp) {
    be->RmsNormBackward(dy, x, w, rstd, rows, dim, dx, g.f32 ? g.f32 + offset : sink);
    return;
  }
  be->Fill(scratch, dim, 0.0f);
  be->RmsNormBackward(dy, x, w, rstd, rows, dim, dx, scratch);
  be->CastFromF32(scratch, static_cast<char*>(g.lp) + offset * static_cast<int64_t>(DTypeSize(g.dt)), dim, g.dt);
}

}  // namespace shard
