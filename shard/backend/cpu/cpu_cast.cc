// fp32 <-> bf16/fp16 casts over n elements (mixed precision: the weights FSDP
// gathers and the gradients it reduces travel as two bytes). Branch-free so
// GCC vectorises each loop; the bits equal the scalar reference conversions in
// shard/tensor/dtype.h (round to nearest even, NaN stays NaN, overflow -> inf),
// which tests/unit/backend/cpu_cast_test.cc checks over wide bit-pattern sweeps.
#include <bit>
#include <cstring>

#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/backend/cpu/cpu_math.h"

namespace shard::cpu {
namespace {

constexpr int64_t kCastGrain = 1 << 16;  // elements per ParallelFor chunk, at least

inline uint16_t ToBF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? ((x >> 16) | 0x40u) : rounded);
}

inline float FromBF16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// fp32 -> IEEE half without branches (M. Dukhan's FP16 library method): scaling
// by 2^112 then 2^-110 lets the FPU do the round-to-nearest-even at the half's
// precision, including subnormals; exponents past half's range saturate to inf.
inline uint16_t ToF16(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007c00u) + (bits & 0x00000fffu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

inline float FromF16(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = std::bit_cast<float>((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  const float denormalized = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t r = two_w < (1u << 27) ? std::bit_cast<uint32_t>(denormalized)
                                        : std::bit_cast<uint32_t>(normalized);
  return std::bit_cast<float>(sign | r);
}

}  // namespace

void NarrowSerial(const float* src, void* dst, int64_t n, DType to) {
  if (to == DType::kF32) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(dst);
  if (to == DType::kBF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = ToBF16(src[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = ToF16(src[i]);
  }
}

void CastFromF32(const float* src, void* dst, int64_t n, DType to) {
  if (to == DType::kF32) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(dst);
  ParallelFor(n, kCastGrain, [&](int64_t b, int64_t e) { NarrowSerial(src + b, out + b, e - b, to); });
}

void WidenSerial(const void* src, float* dst, int64_t n, DType from) {
  if (from == DType::kF32) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  const uint16_t* in = static_cast<const uint16_t*>(src);
  if (from == DType::kBF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = FromBF16(in[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = FromF16(in[i]);
  }
}

void CastToF32(const void* src, float* dst, int64_t n, DType from) {
  if (from == DType::kF32) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  const uint16_t* in = static_cast<const uint16_t*>(src);
  ParallelFor(n, kCastGrain, [&](int64_t b, int64_t e) { WidenSerial(in + b, dst + b, e - b, from); });
}

void RoundThrough(const float* src, float* dst, int64_t n, DType t) {
  if (t == DType::kF32) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  const bool bf16 = t == DType::kBF16;
  ParallelFor(n, kCastGrain, [&](int64_t b, int64_t e) {
    if (bf16) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) dst[i] = FromBF16(ToBF16(src[i]));
    } else {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) dst[i] = FromF16(ToF16(src[i]));
    }
  });
}

}  // namespace shard::cpu
