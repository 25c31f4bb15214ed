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

}  // namespace
}  // namespace shard
