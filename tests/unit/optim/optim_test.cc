#include <gtest/gtest.h>

#include <cmath>

#include "shard/optim/adamw.h"
#include "shard/spec/job_config.h"
#include "shard/spec/optim_config.h"

namespace shard {
namespace {

TEST(LearningRateTest, WarmupThenCosineToFloor) {
  OptimConfig c;
  c.lr = 1.0;
  c.warmup_steps = 4;
  c.min_lr_ratio = 0.1;
  c.schedule = Schedule::kCosine;
  EXPECT_DOUBLE_EQ(LearningRate(c, 0, 14), 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(c, 3, 14), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(c, 4, 14), 1.0);    // decay starts at peak
  EXPECT_NEAR(LearningRate(c, 13, 14), 0.1, 1e-12);  // reaches the floor at the last step
  EXPECT_NEAR(LearningRate(c, 8, 14), 0.1 + 0.45 * (1 + std::cos(M_PI * 4.0 / 9.0)), 1e-12);
  c.schedule = Schedule::kLinear;
  EXPECT_NEAR(LearningRate(c, 13, 14), 0.1, 1e-12);
  EXPECT_NEAR(LearningRate(c, 8, 14), 1.0 - 0.9 * 4.0 / 9.0, 1e-12);
  c.schedule = Schedule::kConstant;
  EXPECT_DOUBLE_EQ(LearningRate(c, 13, 14), 1.0);
}

TEST(OptimConfigTest, ValidateNamesTheField) {
  OptimConfig c;
  c.lr = -1;
  EXPECT_NE(c.Validate().message().find("train.lr"), std::string::npos);
  c = OptimConfig();
  c.beta2 = 1.0;
  EXPECT_NE(c.Validate().message().find("adam_betas"), std::string::npos);
  // The schedule is a closed set, refused when the job file is read.
  auto job = ParseJobConfig("name: j\nmodel: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 8}\n"
                            "train: {schedule: step}\n", "job.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("train.schedule: 'step' is not one of: constant, cosine, linear"),
            std::string::npos) << job.status().ToString();
}

TEST(DecayRangesTest, SplitsSlicesAtTensorBoundaries) {
  LlamaConfig cfg;
  cfg.vocab_size = 10;
  cfg.hidden_size = 4;
  cfg.intermediate_size = 6;
  cfg.num_layers = 1;
  cfg.num_heads = 2;
  cfg.num_kv_heads = 1;
  ParamLayout l = ParamLayout::ForLlama(cfg);
  const UnitSpec& block = l.units[1];
  // head_dim 2: input_norm [0,4) no decay, q,k,v,o [4, 4+16+4+4+16... = 52) decay, post_norm [52,56), mlp [56, 128)
  auto r = DecayRanges(block, 0, block.numel, false);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].begin, 0);
  EXPECT_EQ(r[0].end, 4);
  EXPECT_FALSE(r[0].decay);
  EXPECT_EQ(r[1].end, 52);
  EXPECT_TRUE(r[1].decay);
  EXPECT_EQ(r[2].end, 56);
  EXPECT_TRUE(r[3].decay);
  EXPECT_EQ(r[3].end, block.numel);
  // A slice in the middle with FSDP padding past the end.
  auto s = DecayRanges(block, 50, block.numel + 5, false);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].begin, 0);
  EXPECT_EQ(s[0].end, 2);
  EXPECT_TRUE(s[0].decay);
  EXPECT_FALSE(s[1].decay);
  EXPECT_EQ(s[1].end, 6);
  EXPECT_FALSE(s.back().decay);
  EXPECT_EQ(s.back().end, block.numel + 5 - 50);
  // Asking for decay everywhere merges everything but the padding.
  auto all = DecayRanges(block, 0, block.numel, true);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_TRUE(all[0].decay);
  EXPECT_FALSE(DecayRanges(l.units[0], 0, l.units[0].numel, false)[0].decay);  // embedding
}

}  // namespace
}  // namespace shard
