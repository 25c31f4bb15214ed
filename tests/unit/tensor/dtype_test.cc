#include "shard/tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace shard {
namespace {

TEST(DTypeTest, BF16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_FLOAT_EQ(BF16ToF32(F32ToBF16(1.0f)), 1.0f);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1+2^-7: ties to even (1.0).
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // Slightly above halfway rounds up.
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, F16RoundTripsAndEdgeCases) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.960464477539063e-08f, 3.140625f}) {
    EXPECT_FLOAT_EQ(F16ToF32(F32ToF16(v)), v) << v;
  }
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isinf(F16ToF32(F32ToF16(1e6f))));
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(std::numeric_limits<float>::quiet_NaN()))));
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even.
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(DTypeTest, ParseNames) {
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("float32"), DType::kF32);
  EXPECT_FALSE(ParseDType("int8").ok());
}

}  // namespace
}  // namespace shard
