// Optimizer-state offload on one GPU (label gpu; skips without a GPU): the
// master and moments in pinned host memory (cudaMallocHost through
// Backend::AllocateHost), the host AdamW, the copies both ways.
//
// * The pinned buffers are usable by the CUDA backend's copies.
// * 20 optimizer steps of the tiny model in strict fp32, offloaded vs on the
//   device from the same seed and data: the device holds no moments, and every
//   step's loss is within 1e-3 relative of the on-device run's (the two AdamW
//   implementations differ only in the last bits of float arithmetic — the
//   bound is an unmeasured guess with margin, never run on a GPU yet; a wrong
//   master, stale device shard or lost clip factor is expected to move the loss
//   by far more within a few steps), and both learn.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "shard/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"

namespace shard {
namespace {

TEST(GpuOffloadTest, PinnedHostBuffersRoundTripThroughTheDevice) {
  std::string why;
  auto gpu = gpu_testing::MaybeCuda(&why);
  if (!gpu) GTEST_SKIP() << "no GPU: " << why;
  auto h = HostBuffer::Create(gpu.get(), 4099);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  for (int i = 0; i < 4099; ++i) h->data()[i] = static_cast<float>(i) * 0.5f;
  auto d = DeviceBuffer::Create(gpu.get(), 4099);
  ASSERT_TRUE(d.ok());
  gpu->CopyToDevice(d->data(), h->data(), 4099 * sizeof(float));
  gpu->Scale(d->data(), 4099, 2.0f);
  gpu->CopyToHost(h->data(), d->data(), 4099 * sizeof(float));
  for (int i = 0; i < 4099; ++i) ASSERT_EQ(h->data()[i], static_cast<float>(i)) << i;
}

std::string Tokens() {
  std::string path = ::testing::TempDir() + "/gpu_offload_tokens.u32";
  std::mt19937 rng(9);
  std::vector<std::vector<uint32_t>> phrases(8);
  for (auto& p : phrases) {
    p.resize(5 + rng() % 6);
    for (auto& t : p) t = rng() % 512;
  }
  std::vector<uint32_t> toks;
  while (toks.size() < 30000) {
    auto& p = phrases[rng() % phrases.size()];
    toks.insert(toks.end(), p.begin(), p.end());
  }
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(toks.data()), toks.size() * 4);
  return path;
}

struct Curve {
  std::vector<double> losses;
  int64_t device_bytes = -1, host_bytes = -1;
  int64_t param_shard_bytes = -1, grad_shard_bytes = -1, numel = 0;
};

Curve Train(const std::string& tokens, bool offload, const std::string& precision = "fp32") {
  const std::string yaml = "name: gpu-offload\nmodel: {preset: tiny}\ndata: {tokens: " + tokens +
                           ", seq_len: 64}\ntrain: {steps: 20, global_batch: 16, micro_batch: 8, lr: 3.0e-3, "
                           "warmup_steps: 5, grad_clip: 0.5, weight_decay: 0.1, log_every: 1000, precision: " + precision + "}\n"
                           "parallel: {offload_optimizer: " + std::string(offload ? "true" : "false") +
                           "}\nresources: {device: cuda}\n";
  Curve c;
  auto job = ParseJobConfig(yaml, "gpu-offload.yaml");
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (!job.ok()) return c;
  auto t = Trainer::Create(*job);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return c;
  c.device_bytes = (*t)->optimizer().device_bytes();
  c.host_bytes = (*t)->optimizer().host_bytes();
  c.param_shard_bytes = (*t)->optimizer().param_shard_device_bytes();
  c.grad_shard_bytes = (*t)->optimizer().grad_shard_device_bytes();
  for (int u = 0; u < (*t)->runtime().num_units(); ++u) c.numel += (*t)->runtime().layout(u).shard_numel;
  Status st = (*t)->Run([&](const StepMetrics& m) { c.losses.push_back(m.loss); });
  EXPECT_TRUE(st.ok()) << st.ToString();
  return c;
}

TEST(GpuOffloadTest, OffloadedTrainingTracksOnDeviceTraining) {
  std::string why;
  if (!gpu_testing::MaybeCuda(&why)) GTEST_SKIP() << "no GPU: " << why;
  const std::string tokens = Tokens();
  const Curve dev = Train(tokens, false), off = Train(tokens, true);
  ASSERT_EQ(dev.losses.size(), 20u);
  ASSERT_EQ(off.losses.size(), 20u);
  EXPECT_GT(dev.device_bytes, 0);
  EXPECT_EQ(dev.host_bytes, 0);
  EXPECT_EQ(off.device_bytes, 0);
  EXPECT_GT(off.host_bytes, dev.device_bytes);  // master + m + v + staging > m + v
  double worst = 0;
  for (size_t i = 0; i < dev.losses.size(); ++i) {
    worst = std::max(worst, std::fabs(off.losses[i] - dev.losses[i]) / dev.losses[i]);
    EXPECT_NEAR(off.losses[i], dev.losses[i], 1e-3 * dev.losses[i]) << "step " << i + 1;
  }
  std::printf("  loss on device %.4f -> %.4f | offloaded %.4f -> %.4f (max rel diff %.2e)\n", dev.losses.front(),
              dev.losses.back(), off.losses.front(), off.losses.back(), worst);
  EXPECT_LT(off.losses.back(), 0.7 * off.losses.front());
  // fp32: the device keeps an fp32 parameter shard and no gradient shard.
  EXPECT_EQ(dev.grad_shard_bytes, 4 * dev.numel);
  EXPECT_EQ(off.grad_shard_bytes, 0);
  EXPECT_EQ(off.param_shard_bytes, 4 * off.numel);
}

// bf16 offloaded: the device shard is the master's bf16 cast (2 B/param, cast
// on the host), no gradient shard; the run tracks the bf16 on-device run (the
// same rounded weights; AdamW differs only in the last bits of the fp32 math).
TEST(GpuOffloadTest, Bf16OffloadHoldsATwoByteShardAndTracksTheDeviceRun) {
  std::string why;
  if (!gpu_testing::MaybeCuda(&why)) GTEST_SKIP() << "no GPU: " << why;
  const std::string tokens = Tokens();
  const Curve dev = Train(tokens, false, "bf16"), off = Train(tokens, true, "bf16");
  ASSERT_EQ(dev.losses.size(), 20u);
  ASSERT_EQ(off.losses.size(), 20u);
  EXPECT_EQ(off.grad_shard_bytes, 0);
  EXPECT_LE(off.param_shard_bytes, 2 * off.numel + 2 * 64);  // odd unit sizes round up to whole floats
  EXPECT_GE(off.param_shard_bytes, 2 * off.numel);
  for (size_t i = 0; i < dev.losses.size(); ++i)
    EXPECT_NEAR(off.losses[i], dev.losses[i], 1e-2 * dev.losses[i]) << "step " << i + 1;
  EXPECT_LT(off.losses.back(), 0.7 * off.losses.front());
}

}  // namespace
}  // namespace shard
