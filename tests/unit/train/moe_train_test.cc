// A tiny mixture-of-experts model (preset tiny-qwen3-moe: 8 experts, top-2,
// qwen3 attention) trained through the trainer on the reversal SFT task
// (packed rows with padding, so the aux loss's real-row mask matters) with
// the load-balancing loss on: the loss falls at 1 and 2 ranks (ranks as
// threads, full_shard: the experts are sharded with their layer's unit), 2
// ranks start from the loss 1 rank starts from, and 4 ranks under
// hybrid_shard follow the 1-rank curve. LoRA (attention and every expert's
// projections) and QLoRA (NF4 experts) train at 1 and 2 ranks. The parts not
// built yet are refused with one line: the z-loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>

#include "shard/ckpt/safetensors.h"
#include "shard/plan/planner.h"
#include "shard/spec/run_fingerprint.h"
#include "shard/train/moe_step_figures.h"
#include "shard/train/qlora_base.h"
#include "tests/unit/train/sft_test_util.h"

namespace shard {
namespace {

using namespace sft_testing;

std::string MoeJob(const std::string& jsonl, const std::string& dir, const std::string& extra = "") {
  return "name: moe\nmodel: {preset: tiny-qwen3-moe}\n"
         "data: {jsonl: " + jsonl + ", tokenizer: byte, template: plain, seq_len: 32, packing: true}\n"
         "train: {steps: 12, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 2, log_every: 1000}\n"
         "parallel: {strategy: full_shard}\n"
         "moe: {aux_loss_coef: 0.01}\n"
         "checkpoint: {dir: " + dir + ", every_steps: 0}\n"
         "resources: {device: cpu}\n" + extra;
}

std::vector<double> Train(const std::string& yaml, int world, Status* status, std::vector<std::string> sets = {}) {
  std::vector<double> losses;
  std::vector<Status> st(world);
  std::mutex mu;
  sets.push_back("parallel.world_size=" + std::to_string(world));
  *status = testing_ranks::OnTrainerRanks(yaml, world, sets,
                                          [&](Trainer& t, int r) {
                                            st[r] = t.Run([&](const StepMetrics& m) {
                                              std::lock_guard<std::mutex> lock(mu);
                                              if (r == 0) losses.push_back(m.loss);
                                            });
                                          });
  for (const Status& s : st)
    if (!s.ok() && status->ok()) *status = s;
  return losses;
}

// bf16 on the CPU engine (two-byte activations, bf16-rounded GEMM inputs):
// MoeMlp keeps fp32 routed sets while the model keeps two-byte copies and
// one fp32 working set. Checkpointing on and off give the same losses (the
// kept statistics of sparse layers used to be skipped: NaN gradients), the
// first loss is fp32's to bf16 rounding, and it learns.
TEST(MoeTrainTest, Bf16MatchesCheckpointingAndLearns) {
  const std::string dir = NewDir("moe_bf16");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 64);
  Status s32, sac, snoac;
  const std::vector<double> f32 = Train(MoeJob(train, dir + "/f"), 1, &s32, {"train.precision=fp32"});
  ASSERT_TRUE(s32.ok()) << s32.ToString();
  const std::vector<double> ac =
      Train(MoeJob(train, dir + "/a"), 1, &sac, {"train.precision=bf16", "parallel.activation_checkpointing=true"});
  ASSERT_TRUE(sac.ok()) << sac.ToString();
  const std::vector<double> noac =
      Train(MoeJob(train, dir + "/n"), 1, &snoac, {"train.precision=bf16", "parallel.activation_checkpointing=false"});
  ASSERT_TRUE(snoac.ok()) << snoac.ToString();
  ASSERT_EQ(ac.size(), 12u);
  ASSERT_EQ(noac.size(), 12u);
  for (size_t i = 0; i < ac.size(); ++i) EXPECT_EQ(ac[i], noac[i]) << "step " << i + 1;
  EXPECT_NEAR(ac.front(), f32.front(), 0.02 * f32.front());
  EXPECT_LT(ac.back(), 0.6 * ac.front());
}

TEST(MoeTrainTest, TinyMoeLearnsAtOneAndTwoRanks) {
  const std::string dir = NewDir("moe_train");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 64);
  Status s1, s2;
  const std::vector<double> one = Train(MoeJob(train, dir + "/w1"), 1, &s1);
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  const std::vector<double> two = Train(MoeJob(train, dir + "/w2"), 2, &s2);
  ASSERT_TRUE(s2.ok()) << s2.ToString();
  ASSERT_EQ(one.size(), 12u);
  ASSERT_EQ(two.size(), 12u);
  for (size_t i = 0; i < one.size(); ++i) std::printf("step %2zu  1 rank %.4f  2 ranks %.4f\n", i + 1, one[i], two[i]);
  EXPECT_NEAR(two.front(), one.front(), 1e-4 * one.front());  // same weights, same batch
  EXPECT_LT(one.back(), 0.7 * one.front());
  EXPECT_LT(two.back(), 0.7 * two.front());
  // hybrid_shard: 2 replicas of 2-rank shard groups follow the same curve.
  Status s4;
  const std::vector<double> four =
      Train(MoeJob(train, dir + "/w4"), 4, &s4, {"parallel.strategy=hybrid_shard", "parallel.shard_group_size=2"});
  ASSERT_TRUE(s4.ok()) << s4.ToString();
  ASSERT_EQ(four.size(), 12u);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(four[i], one[i], 1e-3 * one[i]) << "step " << i + 1;
}

// qwen2_moe (tiny-qwen2-moe: 8 experts, top-2 unrenormalised, a shared
// expert of 192 behind its sigmoid gate) through the trainer: 1 and 2 ranks
// (full_shard: the shared expert gathered and reduce-scattered with its
// layer) start from the same loss and learn; bf16 with checkpointing runs.
// LoRA: all-linear (attention, every expert, the shared expert's
// projections, its gate and the router, as PEFT's all-linear wraps them)
// learns and its PEFT export names them, QLoRA too; on attention alone it learns too.
TEST(MoeTrainTest, Qwen2MoeWithItsSharedExpertLearnsAtOneAndTwoRanks) {
  const std::string dir = NewDir("moe_qwen2");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 64);
  const std::string preset = "model.preset=tiny-qwen2-moe";
  Status s1, s2, sb;
  const std::vector<double> one = Train(MoeJob(train, dir + "/w1"), 1, &s1, {preset});
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  const std::vector<double> two = Train(MoeJob(train, dir + "/w2"), 2, &s2, {preset});
  ASSERT_TRUE(s2.ok()) << s2.ToString();
  ASSERT_EQ(one.size(), 12u);
  ASSERT_EQ(two.size(), 12u);
  for (size_t i = 0; i < one.size(); ++i) std::printf("step %2zu  1 rank %.4f  2 ranks %.4f\n", i + 1, one[i], two[i]);
  EXPECT_NEAR(two.front(), one.front(), 1e-4 * one.front());  // same weights, same batch
  EXPECT_LT(one.back(), 0.7 * one.front());
  EXPECT_LT(two.back(), 0.7 * two.front());
  const std::vector<double> bf = Train(MoeJob(train, dir + "/b1"), 1, &sb,
                                       {preset, "train.precision=bf16", "parallel.activation_checkpointing=true"});
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  ASSERT_EQ(bf.size(), 12u);
  EXPECT_NEAR(bf.front(), one.front(), 0.02 * one.front());
  EXPECT_LT(bf.back(), 0.7 * bf.front());
  Status sl, sa;
  const std::vector<double> mlp = Train(MoeJob(train, dir + "/l1",
                                               "peft: {method: lora, r: 4, alpha: 8, target_modules: all-linear}\n"
                                               "export: {hf_dir: " + dir + "/peft}\n"),
                                        1, &sl, {preset, "train.lr=1e-2"});
  ASSERT_TRUE(sl.ok()) << sl.ToString();
  ASSERT_EQ(mlp.size(), 12u);
  std::printf("qwen2_moe LoRA all-linear: %.4f -> %.4f\n", mlp.front(), mlp.back());
  EXPECT_LT(mlp.back(), 0.9 * mlp.front());
  auto f = SafetensorsFile::Open(dir + "/peft/adapter_model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (const char* m : {"mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj",
                        "mlp.shared_expert_gate", "mlp.gate", "mlp.experts.7.down_proj"})
    EXPECT_TRUE(f->Find(std::string("base_model.model.model.layers.1.") + m + ".lora_B.weight")) << m;
  // QLoRA: the experts and the shared expert NF4 under their adapters, the router and the shared gate not.
  Status sq;
  const std::vector<double> q = Train(
      MoeJob(train, dir + "/q1", "peft: {method: qlora, r: 4, alpha: 8, target_modules: all-linear}\n"), 1, &sq,
      {preset, "train.lr=1e-2"});
  ASSERT_TRUE(sq.ok()) << sq.ToString();
  ASSERT_EQ(q.size(), 12u);
  std::printf("qwen2_moe QLoRA all-linear: %.4f -> %.4f\n", q.front(), q.back());
  EXPECT_NEAR(q.front(), mlp.front(), 0.05 * mlp.front());
  EXPECT_LT(q.back(), 0.9 * q.front());
  const std::vector<double> attn = Train(
      MoeJob(train, dir + "/a1", "peft: {method: lora, r: 4, alpha: 8, target_modules: [q_proj, v_proj]}\n"), 1, &sa,
      {preset, "train.lr=1e-2"});
  ASSERT_TRUE(sa.ok()) << sa.ToString();
  ASSERT_EQ(attn.size(), 12u);
  EXPECT_LT(attn.back(), attn.front());
}

// QLoRA on qwen2_moe: the experts and the shared expert's projections are
// NF4, the router and the shared expert's sigmoid gate ([1, d]) stay in the
// compute dtype with the norms and biases.
TEST(MoeTrainTest, QloraKeepsTheRouterAndTheSharedGateUnquantised) {
  const ParamLayout layout = ParamLayout::ForLlama(*LlamaPreset("tiny-qwen2-moe"));
  const std::vector<Nf4UnitSpec> specs = QloraUnitSpecs(layout);
  const UnitSpec& b = layout.units[layout.block_unit(0)];
  ASSERT_TRUE(b.sparse);
  auto kept = [&](int t) {
    for (const auto& [off, n] : specs[layout.block_unit(0)].keep)
      if (off == b.tensors[t].offset && n == b.tensors[t].numel) return true;
    return false;
  };
  EXPECT_TRUE(kept(kRouter));
  EXPECT_TRUE(kept(SharedExpertTensor(8, kSharedExpertGate)));
  EXPECT_FALSE(kept(SharedExpertTensor(8, kSharedGate)));
  EXPECT_FALSE(kept(SharedExpertTensor(8, kSharedDown)));
  EXPECT_FALSE(kept(ExpertTensor(3, kExpertUp)));
  EXPECT_TRUE(kept(ParamLayout::ExtrasOf(b).q_bias));
}

// The step's router figures (StepMetrics' moe_*): the aux loss is reported,
// each sparse layer's expert shares sum to 1, and 2 ranks (half the batch
// each, summed over ranks) report the shares 1 rank does at the first step
// (same weights, same batch).
TEST(MoeTrainTest, StepMetricsCarryTheRoutersFigures) {
  const std::string dir = NewDir("moe_figures");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 64);
  auto first_step = [&](int world, const std::string& sub) {
    std::vector<StepMetrics> out;
    std::mutex mu;
    const Status s = testing_ranks::OnTrainerRanks(
        MoeJob(train, dir + sub), world, {"parallel.world_size=" + std::to_string(world), "train.steps=2"},
        [&](Trainer& t, int r) {
          (void)t.Run([&](const StepMetrics& m) {
            std::lock_guard<std::mutex> lock(mu);
            if (r == 0) out.push_back(m);
          });
        });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  };
  const std::vector<StepMetrics> one = first_step(1, "/f1"), two = first_step(2, "/f2");
  ASSERT_EQ(one.size(), 2u);
  ASSERT_EQ(two.size(), 2u);
  const StepMetrics& m = one[0];
  EXPECT_EQ(m.moe_experts, 8);
  ASSERT_GT(m.moe_layers, 0);
  ASSERT_EQ(m.expert_load.size(), static_cast<size_t>(m.moe_layers * m.moe_experts));
  for (int64_t l = 0; l < m.moe_layers; ++l) {
    double sum = 0;
    for (int e = 0; e < m.moe_experts; ++e) sum += m.expert_load[l * m.moe_experts + e];
    EXPECT_NEAR(sum, 1.0, 1e-12) << "layer " << l;
  }
  EXPECT_GT(m.moe_aux_loss, 0);
  EXPECT_GE(m.moe_imbalance_max, m.moe_imbalance_mean);
  EXPECT_GE(m.moe_imbalance_mean, 1.0);
  for (size_t i = 0; i < m.expert_load.size(); ++i)
    EXPECT_NEAR(two[0].expert_load[i], m.expert_load[i], 1e-12) << "share " << i << " summed over 2 ranks";
  EXPECT_NEAR(two[0].moe_aux_loss, m.moe_aux_loss, 0.05 * m.moe_aux_loss) << "mean over every rank's micro-batches";
}

// The router's figures reach TensorBoard (rank 0's event file): the aux
// loss, the imbalance and each sparse layer's expert shares.
TEST(MoeTrainTest, TensorBoardCarriesTheRoutersTags) {
  const std::string dir = NewDir("moe_tb");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 64);
  DistContext base;
  base.tensorboard = true;
  const Status st = testing_ranks::OnTrainerRanks(
      MoeJob(train, dir + "/ckpt"), 1, {"train.steps=2"}, [&](Trainer& t, int) { ASSERT_TRUE(t.Run().ok()); }, base);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::string events;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/ckpt"))
    if (e.path().filename().string().rfind("events.out.tfevents", 0) == 0) {
      std::ifstream f(e.path(), std::ios::binary);
      events.assign(std::istreambuf_iterator<char>(f), {});
    }
  ASSERT_FALSE(events.empty()) << "no event file under " << dir;
  for (const char* tag : {"moe/aux_loss", "moe/imbalance_max", "moe/imbalance_mean", "moe/expert_load/0/0",
                          "moe/expert_load/0/7"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag;
}

// The pure part: world sums of slot counts to shares and the imbalance.
TEST(MoeTrainTest, ExpertSharesAndImbalanceFromTheSums) {
  LlamaConfig c;
  c.num_layers = 2;
  c.moe.num_experts = 4;
  c.moe.experts_per_tok = 2;
  ASSERT_TRUE(c.sparse_layer(0) && c.sparse_layer(1));
  // aux sum 3 over 4 micro-batches; layer 0: 40 slots, even; layer 1: 20 slots, one expert takes half.
  const std::vector<double> sums = {3, 4, 10, 10, 10, 10, 10, 4, 4, 2};
  StepMetrics m;
  MoeFiguresFromSums(c, sums, &m);
  EXPECT_DOUBLE_EQ(m.moe_aux_loss, 0.75);
  EXPECT_EQ(m.moe_layers, 2);
  EXPECT_EQ(m.expert_load, (std::vector<double>{0.25, 0.25, 0.25, 0.25, 0.5, 0.2, 0.2, 0.1}));
  EXPECT_DOUBLE_EQ(m.moe_imbalance_max, 2.0);    // 0.5 / 0.25
  EXPECT_DOUBLE_EQ(m.moe_imbalance_mean, 1.5);   // (1 + 2) / 2
}

// The coefficient reaches the gradients; absent, it is transformers' default
// (the preset's output_router_logits is false: 0), identical to an explicit 0.
TEST(MoeTrainTest, AuxLossCoefficientDefaultsToTransformers) {
  const std::string dir = NewDir("moe_coef");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 32);
  auto job = [&](const std::string& sub, const std::string& coef) {
    std::string y = MoeJob(train, dir + "/" + sub);
    const std::string line = "moe: {aux_loss_coef: 0.01}\n";
    y.replace(y.find(line), line.size(), coef.empty() ? "" : "moe: {aux_loss_coef: " + coef + "}\n");
    return y;
  };
  Status a, b, c;
  const auto absent = Train(job("a", ""), 1, &a);
  const auto zero = Train(job("z", "0"), 1, &b);
  const auto on = Train(job("o", "0.5"), 1, &c);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.ToString() << b.ToString() << c.ToString();
  EXPECT_EQ(absent, zero);
  EXPECT_EQ(on.front(), zero.front());  // the aux loss is not in the reported loss
  EXPECT_NE(on.back(), zero.back());
  // The router z-loss (moe.z_loss_coef) reaches the gradients too, and is not in the reported loss.
  Status d;
  const auto z = Train(job("zl", "0"), 1, &d, {"moe.z_loss_coef=0.5"});
  ASSERT_TRUE(d.ok()) << d.ToString();
  EXPECT_EQ(z.front(), zero.front());
  EXPECT_NE(z.back(), zero.back());
  for (double v : z) EXPECT_TRUE(std::isfinite(v));
}

TEST(MoeTrainTest, WhatIsNotBuiltIsRefusedWithOneLine) {
  const std::string dir = NewDir("moe_refuse");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 8);
  Status st;
  auto z = ParseJobConfig(MoeJob(train, dir + "/z", "") , "job.yaml", {"moe.z_loss_coef=-0.001"});
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("moe.z_loss_coef must be a number in [0, 100]"), std::string::npos)
      << z.status().ToString();
  auto typo = ParseJobConfig(MoeJob(train, dir + "/t", ""), "job.yaml", {"moe.aux_los_coef=1"});
  ASSERT_FALSE(typo.ok());
  auto job = ParseJobConfig(MoeJob(train, dir + "/plan"), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  // The coefficient is part of the run's identity (a resume with another one is another run).
  auto other = ParseJobConfig(MoeJob(train, dir + "/plan"), "job.yaml", {"moe.aux_loss_coef=0.02"});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(RunKeysOf(*job).at("moe.aux_loss_coef"), "0.01");
  EXPECT_NE(RunFingerprint(RunKeysOf(*job)), RunFingerprint(RunKeysOf(*other)));
  auto zon = ParseJobConfig(MoeJob(train, dir + "/plan"), "job.yaml", {"moe.z_loss_coef=0.001"});
  ASSERT_TRUE(zon.ok()) << zon.status().ToString();
  EXPECT_EQ(RunKeysOf(*zon).at("moe.z_loss_coef"), "0.001");
  EXPECT_EQ(RunKeysOf(*job).count("moe.z_loss_coef"), 0u);  // off: the fingerprints of existing runs hold
  plan::ClusterSpec cluster;
  cluster.cpu_only = true;
  // The planner prices MoE (tests/unit/sim/recipe_moe_test.cc), peft: on it too.
  auto w = plan::WorkloadFromJob(*job, cluster);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto lora = ParseJobConfig(MoeJob(train, dir + "/plan"), "job.yaml", {"peft.method=lora"});
  ASSERT_TRUE(lora.ok()) << lora.status().ToString();
  auto wl = plan::WorkloadFromJob(*lora, cluster);
  EXPECT_TRUE(wl.ok()) << wl.status().ToString();
}

// The router's adapter alone beside q_proj (target_modules [gate, q_proj]) on
// tiny-qwen3-moe with the aux loss and the z-loss on: the loss falls, and the
// router's lora_B, zero at the start, has moved (its gradient is the router
// logits' gradient: the combine weights, the aux loss, the z-loss). Named on
// a dense model, 'gate' is refused with one line.
TEST(MoeTrainTest, RouterAdapterLearnsWhenNamed) {
  const std::string dir = NewDir("moe_router_lora");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 64);
  Status s;
  const std::vector<double> l = Train(MoeJob(train, dir + "/r1",
                                             "peft: {method: lora, r: 4, alpha: 8, target_modules: [gate, q_proj]}\n"
                                             "export: {hf_dir: " + dir + "/peft}\n"),
                                      1, &s, {"train.lr=1e-2", "train.steps=20", "moe.z_loss_coef=0.001"});
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(l.size(), 20u);
  std::printf("router + q_proj LoRA: %.4f -> %.4f\n", l.front(), l.back());
  EXPECT_LT(l.back(), 0.95 * l.front());
  auto f = SafetensorsFile::Open(dir + "/peft/adapter_model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->tensors().size(), static_cast<size_t>(4 * 2 * 2));
  for (int layer = 0; layer < 4; ++layer) {
    const std::string b = "base_model.model.model.layers." + std::to_string(layer) + ".mlp.gate.lora_B.weight";
    ASSERT_TRUE(f->Find(b)) << b;
    std::vector<float> v(static_cast<size_t>(8 * 4));
    ASSERT_TRUE(f->ReadF32(b, {8, 4}, v.data()).ok()) << b;
    double norm = 0;
    for (float x : v) norm += static_cast<double>(x) * x;
    EXPECT_GT(norm, 0.0) << b << ": the router's adapter did not train";
  }
  Status sd;
  Train(MoeJob(train, dir + "/d1", "peft: {method: lora, target_modules: [gate]}\n"), 1, &sd,
        {"model.preset=tiny", "moe.aux_loss_coef=0"});
  EXPECT_FALSE(sd.ok());
  EXPECT_NE(sd.message().find("'gate' is the mixture-of-experts router"), std::string::npos) << sd.ToString();
}

// LoRA on MoE through the trainer: adapters on the attention, on every
// expert's gate/up/down and on the router (all-linear, as PEFT's), the base frozen.
// 1 and 2 ranks (full_shard: each rank gathers the frozen experts) start from
// the same loss and follow the same curve; the loss falls (on the preset's
// random base the adapters learn the byte statistics: 6.29 -> 5.30 in 40 steps). QLoRA (the experts
// stored as NF4, the router fp32) learns too.
TEST(MoeTrainTest, LoraAndQloraOnExpertsLearnAtOneAndTwoRanks) {
  const std::string dir = NewDir("moe_lora");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 64);
  const std::string peft = "peft: {method: lora, r: 8, alpha: 16, target_modules: all-linear}\n";
  Status s1, s2, sq;
  const std::vector<std::string> sets = {"train.lr=1e-2", "train.steps=40"};
  const std::vector<double> one =
      Train(MoeJob(train, dir + "/l1", peft + "export: {hf_dir: " + dir + "/peft}\n"), 1, &s1, sets);
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  const std::vector<double> two = Train(MoeJob(train, dir + "/l2", peft), 2, &s2, sets);
  ASSERT_TRUE(s2.ok()) << s2.ToString();
  std::vector<std::string> qsets = sets;
  qsets.push_back("peft.method=qlora");
  const std::vector<double> q = Train(MoeJob(train, dir + "/q1", peft), 1, &sq, qsets);
  ASSERT_TRUE(sq.ok()) << sq.ToString();
  ASSERT_EQ(one.size(), 40u);
  ASSERT_EQ(two.size(), 40u);
  ASSERT_EQ(q.size(), 40u);
  for (size_t i = 0; i < one.size(); i += 3)
    std::printf("step %2zu  lora 1 rank %.4f  2 ranks %.4f  qlora %.4f\n", i + 1, one[i], two[i], q[i]);
  // The same curve while the sums' order differences stay below a routing flip (later steps drift ~0.3%).
  for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(two[i], one[i], 1e-3 * one[i]) << "step " << i + 1;
  EXPECT_LT(two.back(), 0.9 * two.front());
  EXPECT_LT(one.back(), 0.9 * one.front());  // a random base: the adapters learn the byte statistics
  EXPECT_LT(q.back(), 0.9 * q.front());
  EXPECT_NEAR(q.front(), one.front(), 0.05 * one.front());  // NF4 rounding of the same base
  // The PEFT export holds every layer's attention and every expert's adapters
  // under PEFT's names (tiny-qwen3-moe: 4 sparse layers, 8 experts).
  auto f = SafetensorsFile::Open(dir + "/peft/adapter_model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->tensors().size(), static_cast<size_t>(4 * 2 * (4 + 8 * 3 + 1)));
  ASSERT_TRUE(f->Find("base_model.model.model.layers.3.mlp.experts.7.down_proj.lora_B.weight"));
  ASSERT_TRUE(f->Find("base_model.model.model.layers.3.mlp.gate.lora_B.weight"));
  // Adapter dropout on the experts runs too (its masks regenerate in the backward).
  Status sd;
  std::vector<std::string> dsets = sets;
  dsets.push_back("peft.dropout=0.1");
  const std::vector<double> drop = Train(MoeJob(train, dir + "/d1", peft), 1, &sd, dsets);
  ASSERT_TRUE(sd.ok()) << sd.ToString();
  ASSERT_EQ(drop.size(), 40u);
  EXPECT_EQ(drop.front(), one.front());  // B starts at zero: dropout changes nothing at step 1
  EXPECT_LT(drop.back(), 0.9 * drop.front());
  // bf16 (two-byte base gathers and GEMM inputs, the adapters' GEMMs rounded the same way).
  Status sb;
  std::vector<std::string> bsets = sets;
  bsets.push_back("train.precision=bf16");
  const std::vector<double> bf = Train(MoeJob(train, dir + "/b1", peft), 1, &sb, bsets);
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  ASSERT_EQ(bf.size(), 40u);
  EXPECT_NEAR(bf.front(), one.front(), 0.02 * one.front());
  EXPECT_LT(bf.back(), 0.9 * bf.front());
}

// Preference training on MoE: DPO and IPO on tiny-qwen3-moe (the reference
// pass, then the policy; LoRA-free, full_shard at 2 ranks) run with finite
// figures, start at the objective's value for policy = reference (DPO: log 2)
// and fall. The load-balancing loss is not applied there: a nonzero
// coefficient is refused with one line rather than ignored.
TEST(MoeTrainTest, DpoAndIpoRunOnMoe) {
  const std::string dir = NewDir("moe_pref");
  std::mt19937 rng(3);
  const std::string pairs = dir + "/pairs.jsonl";
  {
    std::ofstream f(pairs);
    for (int i = 0; i < 32; ++i) {
      std::string w;
      for (int n = 3 + static_cast<int>(rng() % 4); n > 0; --n) w += static_cast<char>('a' + rng() % 8);
      const std::string rev(w.rbegin(), w.rend());
      f << "{\"prompt\":\"rev " << w << "=\",\"chosen\":\"" << rev << "\",\"rejected\":\"" << (rev == w ? w + "a" : w)
        << "\"}\n";
    }
  }
  auto job = [&](const std::string& sub, const std::string& method, const std::string& aux) {
    return "name: moe-pref\nmodel: {preset: tiny-qwen3-moe}\n"
           "data: {jsonl: " + pairs + ", tokenizer: byte, template: plain, seq_len: 32}\n"
           "train: {steps: 8, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup_steps: 0, schedule: constant, "
           "log_every: 1000}\n"
           "parallel: {strategy: full_shard}\n"
           "preference: {method: " + method + ", beta: 0.1}\n" + aux +
           "checkpoint: {dir: " + dir + "/" + sub + ", every_steps: 0}\nresources: {device: cpu}\n";
  };
  for (const char* method : {"dpo", "ipo"}) {
    Status st;
    const std::vector<double> l = Train(job(method, method, ""), 2, &st);
    ASSERT_TRUE(st.ok()) << method << ": " << st.ToString();
    ASSERT_EQ(l.size(), 8u) << method;
    for (size_t i = 0; i < l.size(); ++i) {
      std::printf("%s step %zu loss %.5f\n", method, i + 1, l[i]);
      EXPECT_TRUE(std::isfinite(l[i])) << method << " step " << i + 1;
    }
    if (std::string(method) == "dpo") EXPECT_NEAR(l.front(), std::log(2.0), 1e-5);  // policy = reference
    EXPECT_LT(l.back(), 0.9 * l.front()) << method;
  }
  Status refused;
  Train(job("aux", "dpo", "moe: {aux_loss_coef: 0.01}\n"), 1, &refused);
  EXPECT_EQ(refused.code(), StatusCode::kUnimplemented) << refused.ToString();
  EXPECT_NE(refused.message().find("moe.aux_loss_coef 0.01: the router losses are not applied under preference: dpo"),
            std::string::npos)
      << refused.ToString();
}

}  // namespace
}  // namespace shard
