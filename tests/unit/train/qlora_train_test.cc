// QLoRA through the trainer (peft: method qlora): the blocks' linear layers
// held as NF4 records per shard, gathered packed and dequantised just before
// use. Checked against an independent reference: the test quantises the base
// itself (brute-force nearest codebook value per block of 64 laid over each
// block unit's flat buffer, 1-D tensors left alone), writes that dequantised
// base as an HF folder, and trains plain LoRA on it — under train.precision
// fp32 the two runs are the same arithmetic, so losses and adapters agree bit
// for bit. Then: ranks as threads across strategies agree with one rank; the
// base never moves and has no gradient or optimizer state; adapter-only
// checkpoints resume exactly (the base re-quantised from scratch); the merged
// export is the dequantised base + s·B·A; bf16 and double quantisation learn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "shard/model/hf_io.h"
#include "shard/model/init.h"
#include "shard/tensor/nf4.h"
#include "shard/train/trainer.h"
#include "tests/unit/train/lora_test_util.h"
#include "tests/unit/train/phrase_tokens.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

using lora_testing::AdapterLayers;
using lora_testing::MaxRelDiff;

std::string MakeTokens(const std::string& name, int n, int vocab) {
  return testing_tokens::MakePhraseTokens(name, n, vocab, /*seed=*/5);
}

std::string Job(const std::string& tokens, int world, const std::string& method,
                const std::string& model = "{preset: tiny}") {
  return "name: qlora\nmodel: " + model + "\ndata: {tokens: " + tokens +
         ", seq_len: 32}\ntrain: {steps: 8, global_batch: 8, micro_batch: 2, lr: 1.0e-2, warmup_steps: 2, "
         "weight_decay: 0.01, log_every: 1000, precision: fp32}\nparallel: {world_size: " +
         std::to_string(world) + "}\ncheckpoint: {dir: " + testing::TempDir() +
         "/qlora_ckpt, resume: none}\nresources: {device: cpu}\npeft: {method: " + method +
         ", r: 4, alpha: 8, target_modules: all-linear}\n";
}

struct RunOut {
  std::vector<double> losses;
  std::vector<std::vector<float>> adapters;  // per layer
  bool base_unchanged = true;
  int64_t grad_bytes = -1, moment_bytes = -1, param_bytes = -1;
};

RunOut Train(const std::string& tokens, int world, const std::string& method, const std::vector<std::string>& sets,
             const std::string& model = "{preset: tiny}") {
  std::vector<RunOut> outs(world);
  const Status created = testing_ranks::OnTrainerRanks(Job(tokens, world, method, model), world, sets, [&](Trainer& tr, int r) {
    RunOut& o = outs[r];
    o.grad_bytes = tr.runtime().grad_shard_device_bytes();
    o.moment_bytes = tr.runtime().moment_device_bytes();
    o.param_bytes = tr.runtime().param_shard_device_bytes();
    std::vector<std::vector<float>> before(tr.runtime().num_units());
    for (int u = 0; u < tr.runtime().num_units(); ++u) {
      const float* p = tr.runtime().param_shard(u);  // CPU: host memory (an NF4 record for quantised units)
      const int64_t bytes = tr.runtime().quantized(u) ? tr.runtime().nf4_format(u).bytes
                                                      : tr.runtime().layout(u).shard_numel *
                                                            static_cast<int64_t>(DTypeSize(tr.runtime().param_shard_dtype()));
      before[u].assign(p, p + (bytes + 3) / 4);
    }
    ASSERT_TRUE(tr.Run([&](const StepMetrics& m) { o.losses.push_back(m.loss); }).ok());
    for (int u = 0; u < tr.runtime().num_units(); ++u)
      if (std::memcmp(before[u].data(), tr.runtime().param_shard(u), before[u].size() * 4) != 0)  // bytes: records hold no floats
        o.base_unchanged = false;
    o.adapters = AdapterLayers(tr);
  });
  EXPECT_TRUE(created.ok()) << created.ToString();
  for (int r = 1; r < world; ++r) EXPECT_EQ(outs[r].adapters, outs[0].adapters) << "rank " << r << " drifted";
  return outs[0];
}

// ---- The reference quantiser --------------------------------------------

// Nearest codebook index by exhaustive search (ties: the lower index).
int NearestCode(float v) {
  int best = 0;
  for (int i = 1; i < 16; ++i)
    if (std::fabs(v - kNf4Codebook[i]) < std::fabs(v - kNf4Codebook[best])) best = i;
  return best;
}

// A block unit's flat buffer as QLoRA stores it, dequantised: blocks of 64
// from the unit's start, 2-D tensors quantised, 1-D tensors exact.
std::vector<float> ReferenceDequantisedBlock(const UnitSpec& unit, const std::vector<float>& w) {
  const int bs = 64;
  std::vector<float> x((w.size() + bs - 1) / bs * bs, 0.0f);
  std::copy(w.begin(), w.end(), x.begin());
  for (const TensorSpec& t : unit.tensors)
    if (t.shape.size() == 1) std::fill_n(x.begin() + t.offset, t.numel, 0.0f);
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += bs) {
    float amax = 0;
    for (int i = 0; i < bs; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float inv = amax > 0 ? 1.0f / amax : 0.0f;
    for (int i = 0; i < bs; ++i) out[b + i] = kNf4Codebook[NearestCode(x[b + i] * inv)] * amax;
  }
  out.resize(w.size());
  for (const TensorSpec& t : unit.tensors)
    if (t.shape.size() == 1) std::copy_n(w.begin() + t.offset, t.numel, out.begin() + t.offset);
  return out;
}

// The tiny preset's seeded base, quantised by the reference, as an HF folder.
std::string WriteReferenceBase(const std::string& name, uint64_t seed, LlamaConfig* config_out,
                               ParamLayout* layout_out, bool quantise = true) {
  auto config = LlamaPreset("tiny");
  EXPECT_TRUE(config.ok());
  const ParamLayout layout = ParamLayout::ForLlama(*config);
  const std::string dir = testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  auto get_unit = [&](int u, std::vector<float>* buf) -> Status {
    const UnitSpec& unit = layout.units[u];
    buf->assign(unit.numel, 0.0f);
    InitUnitParams(unit, u, seed, 0.02f, 0, unit.numel, buf->data());
    if (quantise && unit.kind == UnitKind::kBlock) *buf = ReferenceDequantisedBlock(unit, *buf);
    return OkStatus();
  };
  EXPECT_TRUE(ExportHf(dir, *config, layout, get_unit, DType::kF32).ok());
  *config_out = *config;
  *layout_out = layout;
  return dir;
}

TEST(QloraTrain, Fp32StepIsLoraOnTheReferenceDequantisedBase) {
  const std::string tokens = MakeTokens("qlora_ref", 8000, 512);
  LlamaConfig config;
  ParamLayout layout;
  const std::string base = WriteReferenceBase("qlora_ref_base", 1234, &config, &layout);
  RunOut q = Train(tokens, 1, "qlora", {"train.seed=1234"});
  RunOut l = Train(tokens, 1, "lora", {"train.seed=1234"}, "{from_hf: " + base + "}");
  ASSERT_EQ(q.losses.size(), 8u);
  EXPECT_EQ(q.losses, l.losses);  // the first is the forward alone (B = 0); the rest follow the backward
  EXPECT_EQ(q.adapters, l.adapters);
  EXPECT_TRUE(q.base_unchanged);
  EXPECT_LT(q.losses.back(), q.losses.front());
  // Two ranks, full_shard: the same blocks (shards start on block boundaries).
  RunOut q2 = Train(tokens, 2, "qlora", {"train.seed=1234"});
  RunOut l2 = Train(tokens, 2, "lora", {"train.seed=1234"}, "{from_hf: " + base + "}");
  EXPECT_EQ(q2.losses, l2.losses);
  EXPECT_EQ(q2.adapters, l2.adapters);
  // The same base as an HF folder: each rank streams its byte ranges and
  // quantises them, which gives the same records as the seeded init.
  const std::string plain = WriteReferenceBase("qlora_plain_base", 1234, &config, &layout, /*quantise=*/false);
  RunOut qh = Train(tokens, 2, "qlora", {"train.seed=1234"}, "{from_hf: " + plain + "}");
  EXPECT_EQ(qh.losses, q2.losses);
  EXPECT_EQ(qh.adapters, q2.adapters);
}

TEST(QloraTrain, RanksAgreeAcrossStrategiesAndHoldOnlyNf4) {
  const std::string tokens = MakeTokens("qlora_ranks", 8000, 512);
  RunOut one = Train(tokens, 1, "qlora", {});
  RunOut lora = Train(tokens, 1, "lora", {});
  // Block units are ~95% of the tiny model; NF4 is 4.5 bits of 32.
  EXPECT_LT(one.param_bytes, lora.param_bytes / 3);
  for (const char* strategy : {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard"}) {
    for (bool ckpt : {false, true}) {
      SCOPED_TRACE(std::string(strategy) + (ckpt ? " + activation checkpointing" : ""));
      RunOut two = Train(tokens, 2, "qlora",
                         {std::string("parallel.strategy=") + strategy,
                          std::string("parallel.activation_checkpointing=") + (ckpt ? "true" : "false")});
      EXPECT_TRUE(two.base_unchanged);
      EXPECT_EQ(two.grad_bytes, 0);
      EXPECT_EQ(two.moment_bytes, 0);
      ASSERT_EQ(two.losses.size(), one.losses.size());
      for (size_t i = 0; i < one.losses.size(); ++i)
        EXPECT_NEAR(two.losses[i], one.losses[i], 1e-4 * std::fabs(one.losses[i])) << "step " << i + 1;
      EXPECT_LT(MaxRelDiff(two.adapters, one.adapters), 1e-3);
      if (std::string(strategy) != "no_shard") {
        EXPECT_LT(two.param_bytes, one.param_bytes * 0.6);
      }
    }
  }
}

TEST(QloraTrain, Bf16AndDoubleQuantLearn) {
  const std::string tokens = MakeTokens("qlora_bf16", 20000, 512);
  for (const std::vector<std::string>& sets :
       std::vector<std::vector<std::string>>{{"train.precision=bf16"},
                                             {"peft.double_quant=true", "peft.block_size=128"},
                                             {"train.precision=bf16", "peft.double_quant=true"}}) {
    SCOPED_TRACE(sets[0] + (sets.size() > 1 ? " " + sets[1] : ""));
    RunOut two = Train(tokens, 2, "qlora", [&] {
      auto s = sets;
      s.push_back("train.steps=30");
      return s;
    }());
    EXPECT_TRUE(two.base_unchanged);
    EXPECT_LT(two.losses.back(), two.losses.front() - 0.5) << two.losses.front() << " -> " << two.losses.back();
  }
}

// Adapter-only checkpoints: stopped after 4 steps and resumed (the base is
// quantised again from the same weights: deterministic), the run continues as
// the uninterrupted one bit for bit; the step holds adapters + moments only.
TEST(QloraTrain, ResumesExactlyFromAdapterCheckpoints) {
  const std::string tokens = MakeTokens("qlora_resume", 8000, 512);
  const std::string ck = testing::TempDir() + "/qlora_resume_ckpt";
  std::filesystem::remove_all(ck);
  auto make = [&](std::vector<std::string> sets) {
    sets.push_back("checkpoint.dir=" + ck);
    sets.push_back("checkpoint.every_steps=4");
    sets.push_back("peft.double_quant=true");
    auto job = ParseJobConfig(Job(tokens, 1, "qlora"), "job.yaml", sets);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return *job;
  };
  auto whole = Trainer::Create(make({"name=whole"}));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  std::vector<double> whole_losses;
  ASSERT_TRUE((*whole)->Run([&](const StepMetrics& m) { whole_losses.push_back(m.loss); }).ok());
  auto first = Trainer::Create(make({"name=split", "checkpoint.resume=auto"}));
  ASSERT_TRUE(first.ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*first)->Step().ok());
  const std::string step_dir = ck + "/split/lora_step_4";
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(step_dir)) bytes += e.file_size();
  EXPECT_LT(bytes, 3 * 4 * static_cast<uint64_t>((*first)->lora()->numel()) + 8192);
  auto second = Trainer::Create(make({"name=split", "checkpoint.resume=auto"}));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ((*second)->step(), 4);
  std::vector<double> rest;
  ASSERT_TRUE((*second)->Run([&](const StepMetrics& m) { rest.push_back(m.loss); }).ok());
  ASSERT_EQ(rest.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rest[i], whole_losses[4 + i]) << "step " << 5 + i;
  EXPECT_EQ(AdapterLayers(**second), AdapterLayers(**whole));
}

// export.merge of a QLoRA job: the dequantised base + s·B·A, checked against
// the reference quantiser; embedding and head are the original weights.
TEST(QloraTrain, MergedExportIsTheDequantisedBasePlusAdapters) {
  const std::string tokens = MakeTokens("qlora_merge", 6000, 512);
  const std::string dir = testing::TempDir() + "/qlora_merge_out";
  std::filesystem::remove_all(dir);
  LlamaConfig config;
  ParamLayout layout;
  const std::string ref = WriteReferenceBase("qlora_merge_ref", 1234, &config, &layout);
  std::vector<std::vector<float>> ref_units;
  ASSERT_TRUE(LoadHfWeights(ref, layout, &ref_units).ok());
  for (int world : {1, 2}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const std::string out = dir + "/w" + std::to_string(world);
    std::vector<std::vector<float>> trained;
    float scale = 0;
    LoraLayout ll;
    const std::vector<std::string> sets = {"train.steps=4", "train.seed=1234", "export.merge=true",
                                           "export.hf_dir=" + out, "peft.target_modules=[q_proj, v_proj, down_proj]"};
    const Status created = testing_ranks::OnTrainerRanks(Job(tokens, world, "qlora"), world, sets, [&](Trainer& tr, int r) {
      ASSERT_TRUE(tr.Run().ok());
      if (r == 0) {
        trained = AdapterLayers(tr);
        scale = tr.lora()->binding()->scale;
        ll = tr.lora()->layout();
      }
    });
    EXPECT_TRUE(created.ok()) << created.ToString();
    std::vector<std::vector<float>> merged;
    ASSERT_TRUE(LoadHfWeights(out, layout, &merged).ok());
    EXPECT_EQ(merged[0], ref_units[0]);  // the embedding: unquantised
    EXPECT_EQ(merged.back(), ref_units.back());
    for (int l = 0; l < config.num_layers; ++l) {
      const int u = layout.block_unit(l);
      const std::vector<float>& base = ref_units[u];
      for (const LoraTensor& lt : ll.tensors) {
        const TensorSpec& ts = layout.units[u].tensors[LoraBaseTensor(lt.target)];
        for (int64_t o = 0; o < lt.out; o += 3)
          for (int64_t i = 0; i < lt.in; i += 5) {
            double d = 0;
            for (int k = 0; k < ll.r; ++k)
              d += trained[l][lt.b_offset + o * ll.r + k] * trained[l][lt.a_offset + k * lt.in + i];
            ASSERT_NEAR(merged[u][ts.offset + o * lt.in + i], base[ts.offset + o * lt.in + i] + scale * d, 1e-6)
                << ts.hf_name << " " << o << "," << i;
          }
      }
      const TensorSpec& ks = layout.units[u].tensors[kK];  // untargeted: the dequantised base exactly
      for (int64_t i = 0; i < ks.numel; ++i) ASSERT_EQ(merged[u][ks.offset + i], base[ks.offset + i]);
      const TensorSpec& ns = layout.units[u].tensors[kInputNorm];  // a norm: never quantised
      for (int64_t i = 0; i < ns.numel; ++i) ASSERT_EQ(merged[u][ns.offset + i], base[ns.offset + i]);
    }
  }
}

}  // namespace
}  // namespace shard
