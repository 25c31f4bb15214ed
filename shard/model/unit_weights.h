// A unit's parameters as the model reads them. An access may hand a unit out
// in a two-byte type (UnitAccess::ParamsDType: FSDP's compute copy under
// train.precision bf16|fp16, the gathered values as they came off the wire).
// The matrices are then read in that type — GEMM B operands
// (GemmArgs::b_dtype) and the embedding table — while the vectors (norm
// weights, biases: the unit's rank-1 tensors, a few KiB) are widened here to
// fp32 once per Bind for the ops that read fp32. An fp32 unit is read in
// place. Thread-safety: one thread (the model's).
#pragma once

#include <cstdint>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/spec/param_layout.h"

namespace shard {

// A weight matrix: its values and the type they are stored in.
struct WeightRef {
  const float* data = nullptr;
  DType dtype = DType::kF32;
};

// y[n, out] (+)= x[n, in] · W[out, in]^T with W as stored (GemmArgs::b_dtype),
// the inputs rounded to `compute` (GemmArgs::compute); beta 1 adds into y.
void LinearForward(Backend* be, DType compute, const float* x, WeightRef w, int64_t n, int64_t in, int64_t out,
                   float* y, float beta = 0.0f);
// Its backward: dx[n, in] = dy[n, out] · W (beta 1 adds into dx); dW[out, in]
// += dy^T · x unless dw is null (a frozen weight: no weight-gradient GEMM).
void LinearBackward(Backend* be, DType compute, const float* x, WeightRef w, const float* dy, int64_t n, int64_t in,
                    int64_t out, float* dx, float* dw, float dx_beta = 0.0f);

class UnitWeights {
 public:
  UnitWeights() = default;
  // For units laid out as `spec` (every block shares one spec).
  static StatusOr<UnitWeights> Create(Backend* backend, const UnitSpec& spec);

  // Points at a unit's parameters `w`, stored as `dtype`; widens the vectors
  // when that is two-byte (queued on the backend, before any op that reads them).
  void Bind(const float* w, DType dtype);
  DType dtype() const { return dtype_; }
  const UnitSpec& spec() const { return *spec_; }
  // Tensor `t` of the spec (a matrix) in the stored type.
  WeightRef mat(int t) const;
  // Tensor `t` (a rank-1 tensor) in fp32.
  const float* vec(int t) const;

 private:
  struct Run {  // consecutive rank-1 tensors: one widening cast
    int64_t offset = 0, numel = 0, small = 0;
  };
  Backend* backend_ = nullptr;
  const UnitSpec* spec_ = nullptr;
  std::vector<int64_t> small_offset_;  // per tensor: offset in small_, -1 for matrices
  std::vector<Run> runs_;
  DeviceBuffer small_;                 // the widened vectors
  const float* w_ = nullptr;
  DType dtype_ = DType::kF32;
};

}  // namespace shard
