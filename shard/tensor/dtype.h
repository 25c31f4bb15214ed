// Element types shardd stores and computes in, and the fp32 <-> bf16/fp16
// conversions the CPU backend and file readers share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "shard/common/status.h"

namespace shard {

enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
const char* DTypeName(DType t);                       // "fp32", "bf16", "fp16"
StatusOr<DType> ParseDType(const std::string& name);  // accepts fp32/float32, bf16/bfloat16, fp16/float16

// bf16: the upper 16 bits of an fp32, rounded to nearest even (NaN stays NaN).
inline uint16_t F32ToBF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}
inline float BF16ToF32(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// IEEE half precision, round to nearest even, with subnormals and inf/nan.
uint16_t F32ToF16(float f);
float F16ToF32(uint16_t h);

// Converts n elements of `src` (of type `from`) to fp32.
void ConvertToF32(DType from, const void* src, float* dst, size_t n);
// Converts n fp32 elements to `to`.
void ConvertFromF32(DType to, const float* src, void* dst, size_t n);

}  // namespace shard
