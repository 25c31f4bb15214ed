// The CUDA backend's fp32 <-> bf16/fp16 casts against the CPU backend, bit for
// bit (both round to nearest even; NaN compared as NaN), over random values,
// every two-byte pattern, and the rounding/overflow edge cases.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "tests/gpu/gpu_test_util.h"

namespace shard {
namespace {

using CudaCastTest = gpu_testing::GpuVsCpuTest;

bool SameBits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST_F(CudaCastTest, NarrowAndWidenMatchTheCpuBitForBit) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  std::vector<float> x = gpu_testing::Random(100003, 7);
  for (float& v : x) v *= 1e3f;
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f, 65504.0f, 65520.0f, 0x1p-25f, 3 * 0x1p-25f,
                  3.4e38f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), -0.0f, 1e-40f})
    x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  for (DType t : {DType::kBF16, DType::kF16}) {
    DeviceBuffer src = gpu_testing::Up(gpu_.get(), x);
    auto lp = DeviceBuffer::Create(gpu_.get(), (n + 1) / 2);
    ASSERT_TRUE(lp.ok());
    gpu_->CastFromF32(src.data(), lp->data(), n, t);
    std::vector<uint16_t> got(n), want(n);
    gpu_->CopyToHost(got.data(), lp->data(), n * 2);
    cpu_->CastFromF32(x.data(), want.data(), n, t);
    for (int64_t i = 0; i < n; ++i) {
      const float g = t == DType::kBF16 ? BF16ToF32(got[i]) : F16ToF32(got[i]);
      const float w = t == DType::kBF16 ? BF16ToF32(want[i]) : F16ToF32(want[i]);
      ASSERT_TRUE(SameBits(g, w)) << DTypeName(t) << " of " << x[i] << ": gpu " << g << " cpu " << w;
    }
    // Every two-byte pattern widens to the CPU's fp32.
    std::vector<uint16_t> all(65536);
    for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    auto dall = DeviceBuffer::Create(gpu_.get(), 32768);
    auto wide = DeviceBuffer::Create(gpu_.get(), 65536);
    ASSERT_TRUE(dall.ok() && wide.ok());
    gpu_->CopyToDevice(dall->data(), all.data(), 65536 * 2);
    gpu_->CastToF32(dall->data(), wide->data(), 65536, t);
    std::vector<float> gw(65536), cw(65536);
    gpu_->CopyToHost(gw.data(), wide->data(), 65536 * 4);
    cpu_->CastToF32(all.data(), cw.data(), 65536, t);
    for (uint32_t i = 0; i < 65536; ++i) ASSERT_TRUE(SameBits(gw[i], cw[i])) << DTypeName(t) << " pattern " << i;
  }
}

}  // namespace
}  // namespace shard
