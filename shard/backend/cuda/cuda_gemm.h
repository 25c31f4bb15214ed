// Internal to shard/backend/cuda: row-major fp32 GEMMs on cuBLASLt, with the
// matmul descriptors and the heuristic's algorithm cached per shape, stride,
// transpose, beta != 0 and pointer alignment (the model repeats a handful of
// shapes every step, and asking the heuristic costs tens of microseconds).
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
  static StatusOr<std::unique_ptr<LtGemm>> Create(bool tf32, void* stream);
  ~LtGemm();
  // C[m,n] = alpha op(A) op(B) + beta C (backend.h's GemmArgs, row-major).
  void Run(const GemmArgs& g);
  bool tf32() const { return tf32_; }

 private:
  struct Plan;
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int, int>;
  LtGemm(bool tf32, void* stream);  // out of line: Plan is incomplete here
  Plan* GetPlan(const GemmArgs& g);

  bool tf32_;
  void* stream_;
  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device memory
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace shard::cuda
