// Internal to shard/backend/cuda: row-major GEMMs on cuBLASLt, with the
// matmul descriptors and the heuristic's algorithm cached per shape, stride,
// transpose, beta != 0, input type and pointer alignment (the model repeats a
// handful of shapes every step, and asking the heuristic costs tens of
// microseconds). fp32 inputs run fp32 (or TF32) GEMMs; GemmArgs::compute
// bf16/fp16 casts A and B into two-byte scratch on the stream (B not at all
// when GemmArgs::b_dtype already is that type) and runs a tensor-core GEMM
// with fp32 accumulation and an fp32 C. Without native bf16
// (before sm_80) bf16 inputs are rounded through bf16 and multiplied in fp32.
//
// Thread-safety: one thread at a time (the owning backend's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "shard/backend/backend.h"

namespace shard::cuda {

class LtGemm {
 public:
  // tf32: use CUBLAS_COMPUTE_32F_FAST_TF32 (the caller checks the GPU has it).
  // native_bf16: the GPU has bf16 tensor cores (compute capability >= 8.0).
  static StatusOr<std::unique_ptr<LtGemm>> Create(bool tf32, bool native_bf16, void* stream);
  ~LtGemm();
  // C[m,n] = alpha op(A) op(B) + beta C (backend.h's GemmArgs, row-major).
  void Run(const GemmArgs& g);
  bool tf32() const { return tf32_; }

 private:
  struct Plan;
  // A grow-only device buffer, reallocated on the stream (stream-ordered, so
  // growing while queued work still reads the old one is safe).
  struct Scratch {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int, int, int>;
  LtGemm(bool tf32, bool native_bf16, void* stream);  // out of line: Plan is incomplete here
  // `input`: the type A and B hold when they reach cuBLASLt (a, b: their addresses).
  Plan* GetPlan(const GemmArgs& g, DType input, const void* a, const void* b);
  void* Grow(Scratch* s, size_t bytes);
  // The operand's span (rows x ld, last row only `cols`), stored as `stored`
  // values, in `in` as `compute` values, or, when the tensor cores cannot take
  // `compute` (bf16 before sm_80), as fp32 values rounded through it. An
  // operand already in the type cuBLASLt takes is returned as it is; a
  // two-byte one otherwise widened. Returns what to hand cuBLASLt.
  const void* Prepare(const float* x, DType stored, int64_t rows, int64_t cols, int64_t ld, DType compute,
                      Scratch* in);

  bool tf32_;
  bool native_bf16_;
  void* stream_;
  Scratch in_a_, in_b_;  // GEMM inputs in the type cuBLASLt gets (GemmArgs::compute)
  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device memory
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace shard::cuda
