// Two-byte element types for collectives under mixed precision (bf16/fp16
// weights and gradients on the wire), and the reduction arithmetic every
// communicator uses on them: widen to fp32, combine, round once back to the
// wire type (nearest even). Using these same functions in the same order is
// what makes the local and gloo reduce-scatters give identical bits.
// Pure functions; thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shard/comm/collective_util.h"
#include "shard/comm/communicator.h"
#include "shard/tensor/dtype.h"

namespace shard::comm {

struct Bf16Bits {
  uint16_t bits;
};
struct F16Bits {
  uint16_t bits;
};

template <typename W>
concept TwoByteWire = std::is_same_v<W, Bf16Bits> || std::is_same_v<W, F16Bits>;

inline float Widen(Bf16Bits v) { return BF16ToF32(v.bits); }
inline float Widen(F16Bits v) { return F16ToF32(v.bits); }
template <TwoByteWire W>
inline W Narrow(float f) {
  if constexpr (std::is_same_v<W, Bf16Bits>) {
    return W{F32ToBF16(f)};
  } else {
    return W{F32ToF16(f)};
  }
}

// The overloads below are more constrained than collective_util.h's templates,
// so RingReduceScatter<Bf16Bits> and the local backend pick them up.

// dst[i] = round(op(widen(dst[i]), widen(src[i]))); kAvg sums (divide at the end).
template <TwoByteWire W>
void ReduceInto(ReduceOp op, W* __restrict dst, const W* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float a = Widen(dst[i]), b = Widen(src[i]);
    dst[i] = Narrow<W>(op == ReduceOp::kMax ? std::max(a, b) : a + b);
  }
}

// out[i] = round(op(widen(a[i]), widen(b[i]))); out may alias a or b exactly.
template <TwoByteWire W>
void Combine(ReduceOp op, W* out, const W* a, const W* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = Widen(a[i]), y = Widen(b[i]);
    out[i] = Narrow<W>(op == ReduceOp::kMax ? std::max(x, y) : x + y);
  }
}

// kAvg: data[i] = round(widen(data[i]) / world) (the division in fp32).
template <TwoByteWire W>
void FinishAvg(ReduceOp op, W* data, size_t n, int world_size) {
  if (op != ReduceOp::kAvg || world_size == 1) return;
  const float inv = 1.0f / static_cast<float>(world_size);
  for (size_t i = 0; i < n; ++i) data[i] = Narrow<W>(Widen(data[i]) * inv);
}

// The reference reduction of one element in ring order (block b's partial sum
// starts at rank b+1 and ends at rank b): values[r] is rank r's contribution.
// Tests compare every backend's bits to it.
template <TwoByteWire W>
W RingOrderReduce(ReduceOp op, const W* values, int world, int block) {
  if (world == 1) return values[0];
  W acc = values[(block + 1) % world];
  for (int k = 2; k <= world; ++k) ReduceInto(op, &acc, &values[(block + k) % world], 1);
  FinishAvg(op, &acc, 1, world);
  return acc;
}

// The reduce-scatter's dtype switch every ring backend shares: calls
// each(send, recv) with both cast to dtype's element type (float, Bf16Bits or
// F16Bits); an unknown dtype is an error naming `call` on `comm`.
template <typename Each>
Status WithWireType(DType dtype, const void* send, void* recv, const char* call, const Communicator& comm,
                    Each&& each) {
  switch (dtype) {
    case DType::kF32:
      return each(static_cast<const float*>(send), static_cast<float*>(recv));
    case DType::kBF16:
      return each(static_cast<const Bf16Bits*>(send), static_cast<Bf16Bits*>(recv));
    case DType::kF16:
      return each(static_cast<const F16Bits*>(send), static_cast<F16Bits*>(recv));
  }
  return Internal(Where(call, comm) + ": unknown dtype");
}

}  // namespace shard::comm
