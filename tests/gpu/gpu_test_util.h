// Helpers for the GPU tests (label gpu): a CUDA backend beside the CPU
// reference, and host <-> backend copies. Without a GPU (or a CUDA build)
// every test skips with the reason, so ctest counts it as skipped.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shard/backend/backend.h"

namespace shard::gpu_testing {

// The CUDA backend, or null with the reason in *why.
inline std::unique_ptr<Backend> MaybeCuda(std::string* why, bool tf32 = false) {
  BackendOptions o;
  o.allow_tf32 = tf32;
  auto b = CreateBackend("cuda", o);
  if (!b.ok()) {
    *why = b.status().ToString();
    return nullptr;
  }
  return std::move(b.value());
}

#define SKIP_WITHOUT_GPU(backend_ptr, why)                   \
  do {                                                       \
    if (!(backend_ptr)) GTEST_SKIP() << "no GPU: " << (why); \
  } while (0)

// A CUDA backend (null without a GPU: tests SKIP_WITHOUT_GPU(gpu_, why_))
// beside the CPU reference.
class GpuVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu_ = MaybeCuda(&why_);
    auto c = CreateBackend("cpu");
    ASSERT_TRUE(c.ok());
    cpu_ = std::move(c.value());
  }
  std::string why_;
  std::unique_ptr<Backend> gpu_, cpu_;
};

inline DeviceBuffer Up(Backend* be, const std::vector<float>& h) {
  auto d = DeviceBuffer::Create(be, static_cast<int64_t>(h.size()));
  EXPECT_TRUE(d.ok());
  be->CopyToDevice(d->data(), h.data(), h.size() * sizeof(float));
  return std::move(d.value());
}
inline DeviceBuffer UpInt(Backend* be, const std::vector<int32_t>& h) {
  auto d = DeviceBuffer::Create(be, static_cast<int64_t>(h.size()));
  EXPECT_TRUE(d.ok());
  be->CopyToDevice(d->data(), h.data(), h.size() * sizeof(int32_t));
  return std::move(d.value());
}
inline std::vector<float> Down(Backend* be, const DeviceBuffer& d) {
  std::vector<float> h(static_cast<size_t>(d.size()));
  be->CopyToHost(h.data(), d.data(), h.size() * sizeof(float));
  return h;
}

// Packed documents for attention tests: per sequence, runs of equal segment
// ids of random length (1..seq/3), restarting per sequence.
inline std::vector<int32_t> PackedSegments(int64_t batch, int64_t seq, uint32_t seed) {
  std::vector<int32_t> seg(static_cast<size_t>(batch * seq));
  std::mt19937 rng(seed);
  const int64_t span = seq / 3 > 1 ? seq / 3 : 1;
  for (int64_t b = 0; b < batch; ++b) {
    int32_t id = 0;
    int64_t left = 1 + rng() % span;
    for (int64_t t = 0; t < seq; ++t) {
      if (left-- == 0) {
        ++id;
        left = rng() % span;
      }
      seg[b * seq + t] = id;
    }
  }
  return seg;
}

inline std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |gpu - cpu| <= atol + rtol |cpu| everywhere; reports the worst element and
// records the largest error as a test property (visible in the XML/log).
inline void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu, double rtol, double atol,
                        const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double worst = 0, worst_abs = 0;
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double err = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
    const double lim = atol + rtol * std::fabs(static_cast<double>(cpu[i]));
    if (!(err <= lim)) ++bad;
    const double ratio = lim > 0 ? err / lim : (err == 0 ? 0.0 : INFINITY);
    if (!(ratio <= worst)) {  // NaN counts as worst
      worst = ratio;
      worst_i = i;
    }
    if (err > worst_abs) worst_abs = err;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << gpu.size() << " outside atol " << atol << " rtol " << rtol
                     << "; worst [" << worst_i << "] gpu " << gpu[worst_i] << " cpu " << cpu[worst_i];
  std::printf("  %-40s max |gpu-cpu| = %.3g (%.2f of the tolerance)\n", what.c_str(), worst_abs, worst);
}

}  // namespace shard::gpu_testing
