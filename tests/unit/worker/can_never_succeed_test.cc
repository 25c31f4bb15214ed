// Which failures a worker reports as "can never run" (exit 2, not retried):
// the errors the engine raises for inputs no new attempt can fix — data that
// has no target within seq_len, an unsupported model feature, a NaN adapter
// or base, a checkpoint of another base — and not the ones a retry may cure.
#include <gtest/gtest.h>

#include "shard/data/packing.h"
#include "shard/spec/llama_config.h"
#include "worker/agent.h"

namespace shardd {
namespace {

TEST(CanNeverSucceedTest, DataWithoutATargetWithinSeqLen) {
  // One sample of 30 tokens whose only targets lie past seq_len + 1 = 9.
  std::vector<uint32_t> tokens(30, 1);
  std::vector<uint8_t> mask(30, 0);
  for (int i = 25; i < 30; ++i) mask[i] = 1;
  shard::PackingOptions o;
  o.seq_len = 8;
  auto plan = shard::PlanBatch(0, 1, o, 1, [](int64_t p) { return p; },
                               [&](int64_t) { return shard::SampleView{tokens.data(), mask.data(), 30}; });
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(CanNeverSucceed(plan.status())) << plan.status().ToString();
}

TEST(CanNeverSucceedTest, AnUnsupportedModelFeature) {
  for (const char* cfg : {R"({"model_type": "gpt2"})", R"({"model_type": "llama", "hidden_act": "gelu"})"}) {
    auto c = shard::LlamaConfigFromHfJson(cfg, "config.json");
    ASSERT_FALSE(c.ok()) << cfg;
    EXPECT_TRUE(CanNeverSucceed(c.status())) << c.status().ToString();
  }
}

TEST(CanNeverSucceedTest, WhatARetryMayCureIsRetried) {
  for (const shard::Status& st : {shard::Unavailable("peer gone"), shard::ResourceExhausted("out of memory"),
                                  shard::Internal("loss not finite"), shard::DeadlineExceeded("collective timed out"),
                                  shard::FailedPrecondition("stale attempt 1 of job j; exit"), shard::DataLoss("torn")})
    EXPECT_FALSE(CanNeverSucceed(st)) << st.ToString();
  for (const shard::Status& st : {shard::InvalidArgument("x"), shard::NotFound("x"), shard::Unimplemented("x"),
                                  shard::OutOfRange("x")})
    EXPECT_TRUE(CanNeverSucceed(st)) << st.ToString();
}

}  // namespace
}  // namespace shardd
