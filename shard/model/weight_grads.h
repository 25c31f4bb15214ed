// Where a decoder block's weight gradients go (UnitAccess::GradBuffer or
// GradBufferStoreOnce): added into an fp32 unit buffer, as the GEMMs always
// did, or — a two-byte buffer — computed in fp32 into a bounded scratch, a
// chunk of output rows at a time, and stored rounded to nearest even, so a
// block never holds its whole gradient in fp32. Each element is rounded once
// from the same fp32 value an fp32 buffer would hold. Only Backend ops, so
// the CPU and CUDA backends store the same bits. Thread-safety: none (the
// model's compute thread).
#pragma once

#include <cstdint>

#include "shard/backend/backend.h"

namespace shard {

struct WeightGrads {
  float* f32 = nullptr;  // add into (fp32 buffer), or
  void* lp = nullptr;    // store into, rounded to dt
  DType dt = DType::kF32;
  bool frozen() const { return !f32 && !lp; }
};

// Output rows per chunk for a weight of `in` columns under a scratch of
// `scratch_elems` floats: a multiple of 8 (aligned GEMM operands), at least 8.
int64_t WeightGradChunkRows(int64_t in, int64_t scratch_elems);

// dW[out, in] of y = x W^T, i.e. dy^T x, into g at element `offset`: a GEMM
// accumulating into g.f32, or (g.lp) chunks through `scratch`
// (WeightGradChunkRows(in) * in floats at least) stored rounded. `compute`
// is the GEMM's input rounding (GemmArgs::compute).
void WeightGrad(Backend* be, DType compute, const WeightGrads& g, int64_t offset, const float* x, const float* dy,
                int64_t n, int64_t in, int64_t out, float* scratch, int64_t scratch_elems);

// RMSNorm backward with its weight gradient into g at `offset` (dim floats):
// accumulated into g.f32, or through `scratch` (zeroed, dim floats) and
// stored rounded; `sink` takes it when g is frozen.
void NormBackward(Backend* be, const WeightGrads& g, int64_t offset, const float* dy, const float* x, const float* w,
                  const float* rstd, int64_t rows, int dim, float* dx, float* scratch, float* sink);

}  // namespace shard
