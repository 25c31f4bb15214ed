// A run's fingerprint (shard/spec/run_fingerprint.h) is defined by what
// shapes the run, not by its length or plumbing, and a difference is named
// key by key.
#include "shard/spec/run_fingerprint.h"

#include <gtest/gtest.h>

#include <string>

#include "shard/spec/job_config.h"

namespace shard {
namespace {

TEST(RunFingerprintTest, DefinedByWhatShapesTheRunNotByStepsOrPlumbing) {
  auto base = ParseJobConfig("name: a\nmodel: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 16}\n", "j.yaml");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  const std::string fp = RunFingerprint(RunKeysOf(*base));
  EXPECT_EQ(fp.size(), 16u);
  for (const std::string set : {"train.steps=999", "checkpoint.keep_last=9", "checkpoint.every_steps=7",
                                "restart.max_restarts=2", "train.log_every=3", "parallel.activation_checkpointing=true",
                                "train.micro_batch=4", "name=b", "checkpoint.dir=elsewhere"}) {
    auto c = ParseJobConfig("name: a\nmodel: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 16}\n", "j.yaml", {set});
    ASSERT_TRUE(c.ok()) << set << ": " << c.status().ToString();
    EXPECT_EQ(RunFingerprint(RunKeysOf(*c)), fp) << set << " must not change the run";
  }
  for (const std::string set : {"train.lr=1e-3", "data.seq_len=32", "train.global_batch=16", "train.seed=9",
                                "train.precision=fp32", "train.schedule=linear", "model.preset=llama3.2-1b"}) {
    auto c = ParseJobConfig("name: a\nmodel: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 16}\n", "j.yaml", {set});
    ASSERT_TRUE(c.ok()) << set << ": " << c.status().ToString();
    EXPECT_NE(RunFingerprint(RunKeysOf(*c)), fp) << set << " defines another run";
  }
  auto lr = ParseJobConfig("name: a\nmodel: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 16}\n", "j.yaml",
                           {"train.lr=1e-3", "data.seq_len=32"});
  EXPECT_EQ(DescribeRunDifference(RunKeysOf(*base), RunKeysOf(*lr)), "data.seq_len 16 -> 32, train.lr 0.0003 -> 0.001");
}

// preference: is another objective: its method and numbers define the run,
// and an SFT job (no preference:) keeps the fingerprint it had before the
// section existed.
TEST(RunFingerprintTest, ThePreferenceObjectiveDefinesTheRun) {
  const std::string sft = "name: a\nmodel: {preset: tiny}\ndata: {jsonl: p.jsonl, tokenizer: byte, seq_len: 16}\n";
  auto base = ParseJobConfig(sft, "j.yaml");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  for (const auto& [k, v] : RunKeysOf(*base)) EXPECT_NE(k.rfind("preference.", 0), 0u) << k;
  auto dpo = ParseJobConfig(sft + "preference: {method: dpo}\n", "j.yaml");
  ASSERT_TRUE(dpo.ok()) << dpo.status().ToString();
  const std::string fp = RunFingerprint(RunKeysOf(*dpo));
  EXPECT_NE(fp, RunFingerprint(RunKeysOf(*base)));
  for (const std::string set : {"preference.method=ipo", "preference.beta=0.2", "preference.label_smoothing=0.1"}) {
    auto c = ParseJobConfig(sft + "preference: {method: dpo}\n", "j.yaml", {set});
    ASSERT_TRUE(c.ok()) << set << ": " << c.status().ToString();
    EXPECT_NE(RunFingerprint(RunKeysOf(*c)), fp) << set << " defines another run";
  }
  auto orpo = ParseJobConfig(sft + "preference: {method: orpo}\n", "j.yaml", {"preference.orpo_lambda=0.5"});
  ASSERT_TRUE(orpo.ok()) << orpo.status().ToString();
  EXPECT_EQ(RunKeysOf(*orpo).at("preference.orpo_lambda"), "0.5");
}

}  // namespace
}  // namespace shard
