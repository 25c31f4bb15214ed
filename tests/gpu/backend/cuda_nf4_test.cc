// The CUDA NF4 dequantisation kernel (QLoRA's frozen base) against the CPU
// backend, bit for bit: a product of two floats and a round to nearest even
// are the same on both. With and without double quantisation, blocks of 64
// and 256, fp32 / bf16 / fp16 outputs; the record read in place from device
// memory as the FSDP runtime hands it over.
#include <gtest/gtest.h>

#include <bit>

#include "shard/tensor/nf4.h"
#include "tests/gpu/gpu_test_util.h"

namespace shard {
namespace {

using CudaNf4Test = gpu_testing::GpuVsCpuTest;

TEST_F(CudaNf4Test, DequantisationMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  std::vector<float> x = gpu_testing::Random(256 * 700, 11);
  for (float& v : x) v *= 0.02f;
  const int64_t n = static_cast<int64_t>(x.size());
  for (int bs : {64, 256}) {
    for (bool dq : {false, true}) {
      auto t = QuantizeNf4(x.data(), n, Nf4Options{bs, dq});
      ASSERT_TRUE(t.ok());
      // The record's parts on the device.
      auto up = [&](const void* p, size_t bytes) {
        auto b = DeviceBuffer::Create(gpu_.get(), static_cast<int64_t>((bytes + 3) / 4) + 1);
        EXPECT_TRUE(b.ok());
        if (bytes) gpu_->CopyToDevice(b->data(), p, bytes);
        return std::move(*b);
      };
      DeviceBuffer codes = up(t->codes.data(), t->codes.size());
      DeviceBuffer absmax = up(t->absmax.data(), t->absmax.size() * 4);
      DeviceBuffer q = up(t->absmax_q.data(), t->absmax_q.size());
      DeviceBuffer scale = up(t->absmax_scale.data(), t->absmax_scale.size() * 4);
      DeviceBuffer mean = up(&t->absmax_mean, 4);
      Nf4Run dev, host;
      dev.numel = host.numel = n;
      dev.block_size = host.block_size = bs;
      dev.codes = reinterpret_cast<const uint8_t*>(codes.data());
      host.codes = t->codes.data();
      if (dq) {
        dev.absmax_q = reinterpret_cast<const int8_t*>(q.data());
        dev.absmax_scale = scale.data();
        dev.absmax_mean = mean.data();
        host.absmax_q = t->absmax_q.data();
        host.absmax_scale = t->absmax_scale.data();
        host.absmax_mean = &t->absmax_mean;
      } else {
        dev.absmax = absmax.data();
        host.absmax = t->absmax.data();
      }
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        auto out = DeviceBuffer::Create(gpu_.get(), n);
        ASSERT_TRUE(out.ok());
        gpu_->DequantizeNf4(dev, out->data(), dt, DType::kF32);
        std::vector<float> got(n), want(n);
        gpu_->CopyToHost(got.data(), out->data(), n * 4);
        cpu_->DequantizeNf4(host, want.data(), dt, DType::kF32);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
              << "block " << bs << (dq ? " dq " : " ") << DTypeName(dt) << " element " << i;
        if (dt == DType::kF32) continue;
        // Stored two-byte (a two-byte compute copy): bitwise the CPU's.
        gpu_->DequantizeNf4(dev, out->data(), dt, dt);
        std::vector<uint16_t> got_lp(n), want_lp(n);
        gpu_->CopyToHost(got_lp.data(), out->data(), n * 2);
        cpu_->DequantizeNf4(host, reinterpret_cast<float*>(want_lp.data()), dt, dt);
        EXPECT_EQ(got_lp, want_lp) << "block " << bs << (dq ? " dq " : " ") << DTypeName(dt) << " stored two-byte";
      }
    }
  }
}

}  // namespace
}  // namespace shard
