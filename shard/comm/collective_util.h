// Helpers every backend shares: argument checks whose errors name the call and the
// rank, and the element-wise reduction kernels. Pure functions; thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "shard/comm/communicator.h"

namespace shard::comm {

// "AllReduce on gloo:job/a rank 1/4" — the prefix of every error a call returns.
std::string Where(const char* call, const Communicator& comm);

// count >= 0, and both buffers non-null when count > 0 (pass one buffer twice
// for in-place calls).
Status CheckArgs(const char* call, const Communicator& comm, int64_t count, const void* a,
                 const void* b);
Status CheckRoot(const char* call, const Communicator& comm, int root);

// dst[i] = op(dst[i], src[i]); kAvg accumulates a sum (divide once at the end).
template <typename T>
void ReduceInto(ReduceOp op, T* __restrict dst, const T* __restrict src, size_t n) {
  if (op == ReduceOp::kMax) {
    for (size_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] += src[i];
  }
}

// out[i] = op(a[i], b[i]). `out` may alias `a` or `b` exactly (element-wise).
template <typename T>
void Combine(ReduceOp op, T* out, const T* a, const T* b, size_t n) {
  if (op == ReduceOp::kMax) {
    for (size_t i = 0; i < n; ++i) out[i] = std::max(a[i], b[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }
}

// Applies the kAvg division (no-op for other ops).
template <typename T>
void FinishAvg(ReduceOp op, T* data, size_t n, int world_size) {
  if (op != ReduceOp::kAvg || world_size == 1) return;
  const T inv = T(1) / static_cast<T>(world_size);
  for (size_t i = 0; i < n; ++i) data[i] *= inv;
}

}  // namespace shard::comm
