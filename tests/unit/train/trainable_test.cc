// The trainable-parameters seam (shard/train/trainable.h) alone: a job's
// Trainable is the whole model or, under peft:, the adapters; an optimizer
// step through it reaches what is trained and nothing else. Fixture: the tiny
// preset on one CPU rank; a step with zero gradients leaves only AdamW's
// decoupled weight decay, p * (1 - lr * wd), which is exact to predict.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "shard/train/trainer.h"
#include "tests/unit/train/lora_test_util.h"
#include "tests/unit/train/phrase_tokens.h"

namespace shard {
namespace {

std::unique_ptr<Trainer> Make(const std::string& extra) {
  const std::string tokens = testing_tokens::MakePhraseTokens("trainable_tokens", 4000, 512);
  auto job = ParseJobConfig("name: trainable\nmodel: {preset: tiny}\ndata: {tokens: " + tokens +
                                ", seq_len: 16}\ntrain: {steps: 1, global_batch: 2, micro_batch: 2}\n"
                                "checkpoint: {dir: " + testing::TempDir() + "/trainable_ckpt, resume: none}\n"
                                "resources: {device: cpu}\n" + extra,
                            "trainable.yaml");
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  auto t = Trainer::Create(*job);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<std::vector<float>> AllUnits(Trainer& tr) {
  std::vector<std::vector<float>> out(tr.runtime().num_units());
  for (int u = 0; u < tr.runtime().num_units(); ++u) EXPECT_TRUE(tr.UnitParams(u, &out[u]).ok());
  return out;
}

OptimConfig DecayOnly() {
  OptimConfig c;
  c.weight_decay = 0.5;
  return c;
}

TEST(TrainableTest, FullModelStepsTheModelsShards) {
  auto tr = Make("");
  ASSERT_NE(tr, nullptr);
  Trainable& t = tr->trainable();
  EXPECT_EQ(t.adapters(), nullptr);
  EXPECT_EQ(tr->lora(), nullptr);
  EXPECT_STREQ(t.checkpoint_prefix(), "");
  t.ZeroGrads();
  auto sq = t.ReduceGradsNormSquared();
  ASSERT_TRUE(sq.ok()) << sq.status().ToString();
  EXPECT_EQ(*sq, 0.0);
  const auto before = AllUnits(*tr);
  ASSERT_TRUE(t.Step(DecayOnly(), 0.1f, 1, 1.0f).ok());
  const auto after = AllUnits(*tr);
  const float decay = static_cast<float>(1.0 - static_cast<double>(0.1f) * 0.5f);
  int decayed = 0, kept = 0;
  const ParamLayout& layout = tr->layout();
  for (int u = 0; u < layout.num_units(); ++u)
    for (const auto& ts : layout.units[u].tensors)
      for (int64_t i = ts.offset; i < ts.offset + ts.numel; ++i) {
        if (ts.decay) {
          ASSERT_FLOAT_EQ(after[u][i], before[u][i] * decay) << ts.hf_name;
          decayed += before[u][i] != 0.0f;
        } else {
          ASSERT_EQ(after[u][i], before[u][i]) << ts.hf_name;
          ++kept;
        }
      }
  EXPECT_GT(decayed, 0);
  EXPECT_GT(kept, 0);
}

TEST(TrainableTest, LoraStepsOnlyTheAdapters) {
  auto tr = Make("peft: {method: lora, r: 4, alpha: 8, target_modules: all-linear}\n");
  ASSERT_NE(tr, nullptr);
  Trainable& t = tr->trainable();
  ASSERT_NE(t.adapters(), nullptr);
  EXPECT_EQ(tr->lora(), t.adapters());
  EXPECT_STREQ(t.checkpoint_prefix(), "lora_");
  t.ZeroGrads();
  auto sq = t.ReduceGradsNormSquared();
  ASSERT_TRUE(sq.ok()) << sq.status().ToString();
  EXPECT_EQ(*sq, 0.0);
  const auto base_before = AllUnits(*tr);
  const auto lora_before = lora_testing::AdapterLayers(*tr);
  ASSERT_TRUE(t.Step(DecayOnly(), 0.1f, 1, 1.0f).ok());
  EXPECT_EQ(AllUnits(*tr), base_before);  // the base is frozen
  const auto lora_after = lora_testing::AdapterLayers(*tr);
  const float decay = static_cast<float>(1.0 - static_cast<double>(0.1f) * 0.5f);
  int changed = 0;
  for (size_t l = 0; l < lora_before.size(); ++l)
    for (size_t i = 0; i < lora_before[l].size(); ++i) {
      ASSERT_FLOAT_EQ(lora_after[l][i], lora_before[l][i] * decay);
      changed += lora_after[l][i] != lora_before[l][i];
    }
  EXPECT_GT(changed, 0);  // A is random (B starts at zero)
}

TEST(TrainableTest, ExportFollowsWhatIsTrained) {
  auto tr = Make("peft: {method: lora, r: 4, alpha: 8, target_modules: all-linear}\n");
  ASSERT_NE(tr, nullptr);
  const std::string dir = testing::TempDir() + "/trainable_export";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(tr->ExportHf(dir, DType::kF32).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/adapter_config.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/config.json"));
}

}  // namespace
}  // namespace shard
