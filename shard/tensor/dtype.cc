#include "shard/tensor/dtype.h"

namespace shard {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
  }
  return "?";
}

StatusOr<DType> ParseDType(const std::string& name) {
  if (name == "fp32" || name == "float32" || name == "f32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp16" || name == "float16" || name == "f16") return DType::kF16;
  return InvalidArgument("unknown dtype '" + name + "' (expected fp32, bf16 or fp16)");
}

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x47800000u) {                                            // overflow -> inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (absx < 0x38800000u) {  // subnormal or zero in half
    // value = absx as float; half subnormal unit = 2^-24.
    float af;
    std::memcpy(&af, &absx, 4);
    float scaled = af * 16777216.0f;  // 2^24
    // round to nearest even
    uint32_t r = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t exp = ((absx >> 23) - 127 + 15) << 10;
  uint32_t mant = (absx >> 13) & 0x3ffu;
  uint32_t rest = absx & 0x1fffu;
  uint32_t h = exp | mant;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  return static_cast<uint16_t>(sign | h);
}

float F16ToF32(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      float f = static_cast<float>(mant) / 16777216.0f;
      std::memcpy(&x, &f, 4);
      x |= sign;
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void ConvertToF32(DType from, const void* src, float* dst, size_t n) {
  switch (from) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = BF16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
  }
}

void ConvertFromF32(DType to, const float* src, void* dst, size_t n) {
  switch (to) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToBF16(src[i]);
      return;
    }
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
  }
}

}  // namespace shard
