// One-GPU training against the CPU backend.
//
// * Model level: the tiny Llama's ForwardBackward on a packed micro-batch
//   (segment ids, positions restarting per sample), with and without
//   activation checkpointing: loss within 1e-5 relative, every gradient within
//   atol 1e-5 + rtol 1e-3 of the CPU's (strict fp32 GEMMs).
// * Trainer level: 40 optimizer steps of the tiny model with the CPU and the
//   CUDA backend from the same seed and data: in strict fp32 every step's loss
//   within 2e-3 relative of the CPU's; with precision auto (on sm_80+: bf16
//   weights and bf16 GEMM/attention inputs; fp16 + the loss scaler before
//   sm_80) within 3e-2, and both learn (final loss < 0.6 x the first). And
//   precision bf16 on both backends (the CPU rounds the same GEMM and
//   attention inputs, so only summation order and the GPU's rounded P differ)
//   within 3e-2 of each other (a bound taken from the auto case, not yet
//   measured on a GPU).
// * Loss scaler on the GPU: a NaN written into the device gradient shard is
//   seen by the CUDA norm, the step is skipped (weights unchanged) and the
//   dynamic scale halves; a static scale of 1024 trains the unscaled weights.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include "shard/model/llama_model.h"
#include "shard/train/local_params.h"
#include "shard/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/unit/train/phrase_tokens.h"

namespace shard {
namespace {

using gpu_testing::ExpectClose;

struct ModelRun {
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

ModelRun RunModel(Backend* be, bool checkpointing) {
  auto cfg = LlamaPreset("tiny");
  EXPECT_TRUE(cfg.ok());
  const int64_t B = 3, T = 48;
  ModelOptions mo;
  mo.max_batch = B;
  mo.max_seq = T;
  mo.activation_checkpointing = checkpointing;
  auto model = LlamaModel::Create(*cfg, be, mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto params = LocalParams::Create(be, (*model)->layout(), /*with_grads=*/true);
  EXPECT_TRUE(params.ok());
  (*params)->InitRandom(7, 0.05f);
  (*params)->ZeroGrads();
  // Packed samples: segments of 5..20 tokens, positions restarting per sample.
  std::vector<int32_t> tokens(B * T), targets(B * T), pos(B * T), seg(B * T);
  std::mt19937 rng(11);
  for (int64_t b = 0; b < B; ++b) {
    int32_t id = 0, p = 0, left = 5 + rng() % 16;
    for (int64_t t = 0; t < T; ++t) {
      if (left-- == 0) {
        ++id;
        p = 0;
        left = 4 + rng() % 16;
      }
      const int64_t i = b * T + t;
      tokens[i] = static_cast<int32_t>(rng() % cfg->vocab_size);
      targets[i] = rng() % 4 == 0 ? -1 : static_cast<int32_t>(rng() % cfg->vocab_size);
      pos[i] = p++;
      seg[i] = id;
    }
  }
  DeviceBuffer dt = gpu_testing::UpInt(be, tokens), dg = gpu_testing::UpInt(be, targets);
  DeviceBuffer dp = gpu_testing::UpInt(be, pos), ds = gpu_testing::UpInt(be, seg);
  DeviceBatch batch;
  batch.batch = B;
  batch.seq = T;
  batch.tokens = dt.as_int();
  batch.targets = dg.as_int();
  batch.positions = dp.as_int();
  batch.segment_ids = ds.as_int();
  auto loss = (*model)->ForwardBackward(batch, **params, 1.0f / (B * T));
  EXPECT_TRUE(loss.ok()) << loss.status().ToString();
  ModelRun r;
  r.loss = *loss;
  for (int u = 0; u < (*model)->layout().num_units(); ++u) {
    const auto& spec = (*model)->layout().units[u];
    std::vector<float> g(spec.numel);
    be->CopyToHost(g.data(), (*params)->grads(u), g.size() * sizeof(float));
    r.grads.push_back(std::move(g));
  }
  return r;
}

TEST(GpuModelTest, PackedForwardBackwardMatchesCpu) {
  std::string why;
  auto gpu = gpu_testing::MaybeCuda(&why);
  SKIP_WITHOUT_GPU(gpu, why);
  auto cpu = CreateBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  for (bool ckpt : {false, true}) {
    ModelRun g = RunModel(gpu.get(), ckpt), c = RunModel(cpu->get(), ckpt);
    EXPECT_NEAR(g.loss, c.loss, 1e-5 * std::fabs(c.loss)) << "checkpointing " << ckpt;
    ASSERT_EQ(g.grads.size(), c.grads.size());
    for (size_t u = 0; u < g.grads.size(); ++u)
      ExpectClose(g.grads[u], c.grads[u], 1e-3, 1e-5,
                  "grad unit " + std::to_string(u) + (ckpt ? " (checkpointing)" : ""));
  }
}

std::string MakeTokens(int n, int vocab) { return testing_tokens::MakePhraseTokens("gpu_train_tokens", n, vocab); }

std::vector<double> TrainCurve(const std::string& tokens, const std::string& device, const std::string& precision) {
  const std::string yaml = "name: gpu-curve\nmodel: {preset: tiny}\ndata: {tokens: " + tokens +
                           ", seq_len: 64}\ntrain: {steps: 40, global_batch: 16, micro_batch: 8, lr: 3.0e-3, "
                           "warmup_steps: 5, log_every: 1000, precision: " + precision +
                           "}\nresources: {device: " + device + "}\n";
  auto job = ParseJobConfig(yaml, "gpu-curve.yaml");
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  auto t = Trainer::Create(*job);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  std::vector<double> losses;
  if (!t.ok()) return losses;
  Status st = (*t)->Run([&](const StepMetrics& m) { losses.push_back(m.loss); });
  EXPECT_TRUE(st.ok()) << st.ToString();
  return losses;
}

TEST(GpuTrainTest, LossCurveTracksCpu) {
  if (NumCudaDevices() == 0) {
    std::string why;
    gpu_testing::MaybeCuda(&why);
    GTEST_SKIP() << "no GPU: " << why;
  }
  const std::string tokens = MakeTokens(40000, 512);
  const auto cpu = TrainCurve(tokens, "cpu", "fp32");
  const auto fp32 = TrainCurve(tokens, "cuda", "fp32");
  const auto tf32 = TrainCurve(tokens, "cuda", "auto");
  const auto cpu_bf16 = TrainCurve(tokens, "cpu", "bf16");
  const auto cuda_bf16 = TrainCurve(tokens, "cuda", "bf16");
  ASSERT_EQ(cpu_bf16.size(), 40u);
  ASSERT_EQ(cuda_bf16.size(), 40u);
  ASSERT_EQ(cpu.size(), 40u);
  ASSERT_EQ(fp32.size(), 40u);
  ASSERT_EQ(tf32.size(), 40u);
  double worst32 = 0, worst_tf32 = 0, worst_bf16 = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    worst_bf16 = std::max(worst_bf16, std::fabs(cuda_bf16[i] - cpu_bf16[i]) / cpu_bf16[i]);
    EXPECT_NEAR(cuda_bf16[i], cpu_bf16[i], 3e-2 * cpu_bf16[i]) << "bf16 step " << i + 1;
    worst32 = std::max(worst32, std::fabs(fp32[i] - cpu[i]) / cpu[i]);
    worst_tf32 = std::max(worst_tf32, std::fabs(tf32[i] - cpu[i]) / cpu[i]);
    EXPECT_NEAR(fp32[i], cpu[i], 2e-3 * cpu[i]) << "step " << i + 1;
    EXPECT_NEAR(tf32[i], cpu[i], 3e-2 * cpu[i]) << "step " << i + 1;
  }
  std::printf("  loss cpu %.4f -> %.4f | cuda fp32 %.4f -> %.4f (max rel diff %.2e) | cuda auto %.4f -> %.4f "
              "(max rel diff %.2e)\n",
              cpu.front(), cpu.back(), fp32.front(), fp32.back(), worst32, tf32.front(), tf32.back(), worst_tf32);
  std::printf("  loss cpu bf16 %.4f -> %.4f | cuda bf16 %.4f -> %.4f (max rel diff %.2e)\n", cpu_bf16.front(),
              cpu_bf16.back(), cuda_bf16.front(), cuda_bf16.back(), worst_bf16);
  EXPECT_LT(cuda_bf16.back(), 0.6 * cuda_bf16.front());
  EXPECT_LT(fp32.back(), 0.6 * fp32.front());
  EXPECT_LT(tf32.back(), 0.6 * tf32.front());
}

struct ScaledRun {
  std::vector<StepMetrics> metrics;
  std::vector<std::vector<std::vector<float>>> params;  // after each step
  int64_t optimizer_steps = 0;
  double scale = 0;
};

ScaledRun TrainScaled(const std::string& tokens, const std::string& loss_scale, int64_t nan_step) {
  const std::string yaml = "name: gpu-scale\nmodel: {preset: tiny}\ndata: {tokens: " + tokens +
                           ", seq_len: 64}\ntrain: {steps: 5, global_batch: 16, micro_batch: 8, lr: 3.0e-3, "
                           "log_every: 1000, precision: fp32, loss_scale: " + loss_scale +
                           "}\ncheckpoint: {every_steps: 0, resume: none}\nresources: {device: cuda}\n";
  ScaledRun r;
  auto job = ParseJobConfig(yaml, "gpu-scale.yaml");
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (!job.ok()) return r;
  DistContext d;
  d.gradient_hook = [nan_step](int64_t step, Backend& backend, FsdpRuntime& runtime) {
    if (step != nan_step) return;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    backend.CopyToDevice(runtime.grad_shard(0) + 5, &nan, sizeof(float));
  };
  auto t = Trainer::Create(*job, d);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return r;
  Trainer& tr = **t;
  Status st = tr.Run([&](const StepMetrics& m) {
    r.metrics.push_back(m);
    std::vector<std::vector<float>> units(tr.layout().num_units());
    for (int u = 0; u < tr.layout().num_units(); ++u) EXPECT_TRUE(tr.UnitParams(u, &units[u]).ok());
    r.params.push_back(std::move(units));
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  r.optimizer_steps = tr.optimizer_steps();
  r.scale = tr.loss_scaler().scale();
  return r;
}

TEST(GpuTrainTest, LossScalerSkipsANaNStepAndStaticScaleMatchesUnscaled) {
  if (NumCudaDevices() == 0) {
    std::string why;
    gpu_testing::MaybeCuda(&why);
    GTEST_SKIP() << "no GPU: " << why;
  }
  const std::string tokens = MakeTokens(40000, 512);
  const ScaledRun dyn = TrainScaled(tokens, "dynamic", 3);
  ASSERT_EQ(dyn.metrics.size(), 5u);
  for (int s = 0; s < 5; ++s) EXPECT_EQ(dyn.metrics[s].skipped, s == 2) << "step " << s + 1;
  EXPECT_TRUE(dyn.params[2] == dyn.params[1]) << "the skipped step changed the weights";
  EXPECT_FALSE(dyn.params[3] == dyn.params[2]);
  EXPECT_EQ(dyn.scale, 32768.0);
  EXPECT_EQ(dyn.optimizer_steps, 4);

  const ScaledRun none = TrainScaled(tokens, "none", -1), s1024 = TrainScaled(tokens, "1024", -1);
  ASSERT_EQ(none.params.size(), 5u);
  ASSERT_EQ(s1024.params.size(), 5u);
  double worst = 0;
  for (size_t u = 0; u < none.params.back().size(); ++u)
    for (size_t i = 0; i < none.params.back()[u].size(); ++i) {
      const double a = none.params.back()[u][i], b = s1024.params.back()[u][i];
      worst = std::max(worst, std::fabs(a - b));
      ASSERT_LE(std::fabs(a - b), 1e-5 + 1e-4 * std::fabs(a)) << "unit " << u << " element " << i;
    }
  std::printf("  cuda: static loss scale 1024 vs none after 5 steps: max |weight diff| %.3g\n", worst);
}

}  // namespace
}  // namespace shard
