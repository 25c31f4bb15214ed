// preference: with the rest of the engine (issue 31 item 5), ranks as threads:
// a DPO step under each sharding strategy, bf16 and fp16, activation
// checkpointing, LoRA and QLoRA, and the exports (full, PEFT adapter, merged)
// after a DPO job. At step 1 the policy is its reference (the starting
// weights; under peft: the base, the adapters' B being zero), so every mode's
// first loss is log 2 — a reference pass that saw other weights, rows or
// precision than the step would not give it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include "tests/unit/train/sft_test_util.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

using sft_testing::MaxAbsDiff;
using sft_testing::NewDir;
namespace fs = std::filesystem;

// "rev abc=" → chosen "cba", rejected the word as it was.
std::string WritePairs(const std::string& path, int rows) {
  std::mt19937 rng(3);
  std::ofstream f(path);
  for (int i = 0; i < rows; ++i) {
    std::string s;
    for (int n = 3 + static_cast<int>(rng() % 4); n > 0; --n) s += static_cast<char>('a' + rng() % 8);
    std::string rev(s.rbegin(), s.rend());
    f << "{\"prompt\":\"rev " << s << "=\",\"chosen\":\"" << rev << "\",\"rejected\":\"" << (rev == s ? s + "a" : s)
      << "\"}\n";
  }
  return path;
}

std::string Job(const std::string& jsonl, const std::string& ckpt, const std::string& extra = "",
                const std::string& model = "{preset: tiny}") {
  return "name: pref\nmodel: " + model + "\n"
         "data: {jsonl: " + jsonl + ", tokenizer: byte, template: plain, seq_len: 32}\n"
         "train: {steps: 4, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 0, schedule: constant, "
         "precision: fp32, log_every: 1000}\n"
         "checkpoint: {dir: " + ckpt + ", every_steps: 0, async: false, resume: none}\n"
         "resources: {device: cpu}\npreference: {method: dpo, beta: 0.5}\n" + extra;
}

struct ModeRun {
  Status status;
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // rank 0's units after the run
};

// `world` ranks train the job; rank 0's losses and weights; every rank exports to export_dir when set.
ModeRun Train(const std::string& yaml, int world, std::vector<std::string> sets, const std::string& export_dir = "") {
  sets.push_back("parallel.world_size=" + std::to_string(world));
  ModeRun out;
  std::vector<Status> st(world);
  std::mutex mu;
  out.status = testing_ranks::OnTrainerRanks(yaml, world, sets, [&](Trainer& tr, int r) {
    st[r] = tr.Run([&](const StepMetrics& m) {
      if (r == 0) out.losses.push_back(m.loss);
    });
    std::vector<std::vector<float>> params(tr.layout().num_units());
    for (int u = 0; u < tr.layout().num_units() && st[r].ok(); ++u) st[r] = tr.UnitParams(u, &params[u]);
    if (st[r].ok() && !export_dir.empty()) st[r] = tr.ExportHf(export_dir, DType::kF32);
    if (r == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out.params = std::move(params);
    }
  });
  for (const Status& s : st)
    if (out.status.ok() && !s.ok()) out.status = s;
  return out;
}

TEST(PreferenceModes, DpoUnderEveryShardingStrategy) {
  const std::string dir = NewDir("pref_strategies");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 32);
  const ModeRun one = Train(Job(jsonl, dir + "/one"), 1, {"train.micro_batch=8"});
  ASSERT_TRUE(one.status.ok()) << one.status.ToString();
  ASSERT_EQ(one.losses.size(), 4u);
  EXPECT_NEAR(one.losses[0], std::log(2.0), 1e-6);
  for (const auto& [strategy, world] : std::vector<std::pair<std::string, int>>{
           {"full_shard", 2}, {"shard_grad_op", 2}, {"no_shard", 2}, {"hybrid_shard", 4}}) {
    SCOPED_TRACE(strategy);
    std::vector<std::string> sets = {"parallel.strategy=" + strategy};
    if (strategy == "hybrid_shard") sets.push_back("parallel.shard_group_size=2");
    const ModeRun r = Train(Job(jsonl, dir + "/" + strategy), world, sets);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    ASSERT_EQ(r.losses.size(), one.losses.size());
    EXPECT_NEAR(r.losses[0], std::log(2.0), 1e-6) << "the reference pass and the step disagree";
    for (size_t s = 0; s < r.losses.size(); ++s)
      EXPECT_NEAR(r.losses[s], one.losses[s], 1e-5 * one.losses[s]) << "step " << s + 1;
    // AdamW's first step moves a near-tie weight by ±lr whatever fp32 noise decides.
    EXPECT_LT(MaxAbsDiff(r.params, one.params), 3e-3);
  }
  fs::remove_all(dir);
}

TEST(PreferenceModes, DpoUnderBf16Fp16AndActivationCheckpointing) {
  const std::string dir = NewDir("pref_precision");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 32);
  const ModeRun fp32 = Train(Job(jsonl, dir + "/fp32"), 2, {"train.steps=8"});
  ASSERT_TRUE(fp32.status.ok()) << fp32.status.ToString();
  for (const char* precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    const ModeRun r = Train(Job(jsonl, dir + "/" + precision), 2,
                        {"train.steps=8", std::string("train.precision=") + precision});
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    ASSERT_EQ(r.losses.size(), 8u);
    // The pass computes in the step's precision: log 2 at step 1 (bf16
    // exactly; fp16's pass and step differ by ~1e-5 in a pair's sums).
    EXPECT_NEAR(r.losses[0], std::log(2.0), 1e-4);
    for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
    EXPECT_LT(r.losses.back(), r.losses[0]) << "DPO did not learn under " << precision;
    EXPECT_NEAR(r.losses.back(), fp32.losses.back(), 0.05);
  }
  // Activation checkpointing recomputes the same forward: the same steps.
  const ModeRun ac = Train(Job(jsonl, dir + "/ac"), 2, {"train.steps=8", "parallel.activation_checkpointing=true"});
  ASSERT_TRUE(ac.status.ok()) << ac.status.ToString();
  ASSERT_EQ(ac.losses.size(), fp32.losses.size());
  for (size_t s = 0; s < ac.losses.size(); ++s)
    EXPECT_NEAR(ac.losses[s], fp32.losses[s], 1e-6 * fp32.losses[s]) << "step " << s + 1;
  EXPECT_LT(MaxAbsDiff(ac.params, fp32.params), 1e-6);
  fs::remove_all(dir);
}

TEST(PreferenceModes, DpoThroughLoraAndQlora) {
  const std::string dir = NewDir("pref_peft");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 32);
  for (const char* method : {"lora", "qlora"}) {
    SCOPED_TRACE(method);
    const std::string peft = std::string("peft: {method: ") + method + ", r: 4, alpha: 8, target_modules: all-linear}\n";
    const ModeRun one = Train(Job(jsonl, dir + "/" + method + "1", peft), 1, {"train.steps=8", "train.lr=1.0e-2"});
    const ModeRun two = Train(Job(jsonl, dir + "/" + method + "2", peft), 2, {"train.steps=8", "train.lr=1.0e-2"});
    ASSERT_TRUE(one.status.ok()) << one.status.ToString();
    ASSERT_TRUE(two.status.ok()) << two.status.ToString();
    // B = 0: the policy is the base, the reference (scored without adapters).
    EXPECT_NEAR(one.losses[0], std::log(2.0), 1e-6);
    EXPECT_LT(one.losses.back(), one.losses[0]) << "the adapters did not learn";
    for (size_t s = 0; s < one.losses.size(); ++s)
      EXPECT_NEAR(two.losses[s], one.losses[s], 1e-3 * one.losses[s]) << "step " << s + 1;
    EXPECT_EQ(MaxAbsDiff(one.params, two.params), 0.0) << "the frozen base moved";
  }
  fs::remove_all(dir);
}

TEST(PreferenceModes, ExportsAfterADpoJob) {
  const std::string dir = NewDir("pref_export");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 16);
  // Full: an HF folder that a next job starts from (the DPO run's weights).
  const ModeRun full = Train(Job(jsonl, dir + "/full"), 2, {"train.steps=2"}, dir + "/hf");
  ASSERT_TRUE(full.status.ok()) << full.status.ToString();
  for (const char* f : {"config.json", "model.safetensors"}) EXPECT_TRUE(fs::exists(dir + "/hf/" + f)) << f;
  std::vector<std::vector<float>> loaded;
  const Status st = testing_ranks::OnTrainerRanks(Job(jsonl, dir + "/next", "", "{from_hf: " + dir + "/hf}"), 1, {},
                                                  [&](Trainer& tr, int) {
                                                    loaded.resize(tr.layout().num_units());
                                                    for (int u = 0; u < tr.layout().num_units(); ++u)
                                                      ASSERT_TRUE(tr.UnitParams(u, &loaded[u]).ok());
                                                  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(MaxAbsDiff(loaded, full.params), 0.0) << "the export is not the DPO run's weights";
  // PEFT: the adapter folder, and merged into the base.
  const std::string peft = "peft: {method: lora, r: 4, alpha: 8, target_modules: all-linear}\n";
  const ModeRun lora = Train(Job(jsonl, dir + "/lora", peft), 2, {"train.steps=2"}, dir + "/adapter");
  ASSERT_TRUE(lora.status.ok()) << lora.status.ToString();
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    EXPECT_TRUE(fs::exists(dir + "/adapter/" + f)) << f;
  const ModeRun merged = Train(Job(jsonl, dir + "/merged", peft), 2, {"train.steps=2", "export.merge=true"}, dir + "/merged_hf");
  ASSERT_TRUE(merged.status.ok()) << merged.status.ToString();
  EXPECT_TRUE(fs::exists(dir + "/merged_hf/model.safetensors"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shard
