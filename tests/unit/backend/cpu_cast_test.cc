// The CPU backend's fp32 <-> bf16/fp16 casts (mixed precision) against the
// scalar reference conversions in shard/tensor/dtype.h, bit for bit, over a
// wide sweep of fp32 bit patterns and every two-byte pattern; plus the rounding
// rules themselves (nearest even, overflow to inf, NaN stays NaN, subnormals).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/tensor/dtype.h"

namespace shard {
namespace {

class CpuCastTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = CreateBackend("cpu");
    ASSERT_TRUE(b.ok());
    be_ = std::move(b.value());
  }
  std::vector<uint16_t> Narrow(const std::vector<float>& x, DType t) {
    std::vector<uint16_t> out(x.size());
    be_->CastFromF32(x.data(), out.data(), static_cast<int64_t>(x.size()), t);
    return out;
  }
  std::vector<float> Widen(const std::vector<uint16_t>& h, DType t) {
    std::vector<float> out(h.size());
    be_->CastToF32(h.data(), out.data(), static_cast<int64_t>(h.size()), t);
    return out;
  }
  std::unique_ptr<Backend> be_;
};

// Every 251st fp32 bit pattern (~17M values: all exponents, signs, NaN payloads,
// subnormals) plus the neighbourhoods of the rounding and overflow thresholds.
std::vector<float> Sweep() {
  std::vector<float> v;
  for (uint64_t x = 0; x <= 0xffffffffull; x += 251) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(x)));
  for (uint32_t base : {0x3f800000u, 0x477fe000u, 0x477ff000u, 0x47800000u, 0x33000000u, 0x38800000u, 0x387fc000u,
                        0x7f7f0000u, 0x7f7fffffu, 0x7f800000u, 0x7fc00000u})
    for (int d = -40; d <= 40; ++d) {
      v.push_back(std::bit_cast<float>(base + d));
      v.push_back(-std::bit_cast<float>(base + d));
    }
  return v;
}

TEST_F(CpuCastTest, NarrowingMatchesTheScalarReferenceBitForBit) {
  const std::vector<float> x = Sweep();
  const std::vector<uint16_t> bf = Narrow(x, DType::kBF16), hf = Narrow(x, DType::kF16);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(bf[i], F32ToBF16(x[i])) << "bf16 of bits " << std::hex << std::bit_cast<uint32_t>(x[i]);
    ASSERT_EQ(hf[i], F32ToF16(x[i])) << "fp16 of bits " << std::hex << std::bit_cast<uint32_t>(x[i]);
  }
}

TEST_F(CpuCastTest, EveryTwoBytePatternWidensExactlyAndRoundTrips) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (DType t : {DType::kBF16, DType::kF16}) {
    const std::vector<float> wide = Widen(all, t);
    const std::vector<uint16_t> back = Narrow(wide, t);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float ref = t == DType::kBF16 ? BF16ToF32(all[i]) : F16ToF32(all[i]);
      if (std::isnan(ref)) {
        ASSERT_TRUE(std::isnan(wide[i])) << DTypeName(t) << " " << i;
        ASSERT_TRUE(std::isnan(t == DType::kBF16 ? BF16ToF32(back[i]) : F16ToF32(back[i])));
        continue;
      }
      ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]), std::bit_cast<uint32_t>(ref)) << DTypeName(t) << " " << i;
      ASSERT_EQ(back[i], all[i]) << DTypeName(t) << " round trip of " << i;
    }
  }
}

TEST_F(CpuCastTest, RoundsToNearestEvenAndSaturates) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // bf16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  const std::vector<float> x = {1.0f + 0x1p-8f,        // tie -> even (1.0)
                                1.0f + 3 * 0x1p-8f,    // tie -> even (1 + 2^-6)
                                1.0f + 0x1p-8f + 0x1p-20f,  // above the tie -> up
                                -(1.0f + 0x1p-8f), inf, -inf, nan, 3.4e38f, 0.0f, -0.0f};
  const std::vector<float> bf = Widen(Narrow(x, DType::kBF16), DType::kBF16);
  EXPECT_EQ(bf[0], 1.0f);
  EXPECT_EQ(bf[1], 1.0f + 0x1p-6f);
  EXPECT_EQ(bf[2], 1.0f + 0x1p-7f);
  EXPECT_EQ(bf[3], -1.0f);
  EXPECT_EQ(bf[4], inf);
  EXPECT_EQ(bf[5], -inf);
  EXPECT_TRUE(std::isnan(bf[6]));
  EXPECT_EQ(bf[7], inf);  // 3.4e38 rounds past bf16's largest finite value (3.39e38)
  EXPECT_EQ(std::bit_cast<uint32_t>(bf[9]), 0x80000000u);  // -0 keeps its sign

  // fp16: 11 significant bits, largest finite 65504, smallest subnormal 2^-24.
  const std::vector<float> y = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f, 1e6f,
                                0x1p-25f,        3 * 0x1p-25f,        0x1p-24f, -inf,     nan,      0x1p-14f};
  const std::vector<float> hf = Widen(Narrow(y, DType::kF16), DType::kF16);
  EXPECT_EQ(hf[0], 1.0f);
  EXPECT_EQ(hf[1], 1.0f + 0x1p-9f);
  EXPECT_EQ(hf[2], 65504.0f);
  EXPECT_EQ(hf[3], 65504.0f);
  EXPECT_EQ(hf[4], inf);  // the tie above 65504 rounds to even: the next "value" is inf
  EXPECT_EQ(hf[5], inf);
  EXPECT_EQ(hf[6], 0.0f);           // half the smallest subnormal: tie -> even (0)
  EXPECT_EQ(hf[7], 2 * 0x1p-24f);   // 1.5 subnormal units: tie -> even (2)
  EXPECT_EQ(hf[8], 0x1p-24f);
  EXPECT_EQ(hf[9], -inf);
  EXPECT_TRUE(std::isnan(hf[10]));
  EXPECT_EQ(hf[11], 0x1p-14f);  // smallest normal
}

TEST_F(CpuCastTest, Fp32IsACopyAndZeroCountIsANoOp) {
  std::vector<float> a = {1.5f, -2.25f, 3e-40f}, b(3, 0.0f);
  be_->CastFromF32(a.data(), b.data(), 3, DType::kF32);
  EXPECT_EQ(a, b);
  std::vector<float> c(3, 7.0f);
  be_->CastToF32(b.data(), c.data(), 3, DType::kF32);
  EXPECT_EQ(a, c);
  be_->CastFromF32(a.data(), nullptr, 0, DType::kBF16);
  be_->CastToF32(nullptr, c.data(), 0, DType::kF16);
  EXPECT_EQ(a, c);
}

}  // namespace
}  // namespace shard
