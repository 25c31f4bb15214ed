// The job file's preference: section: TRL's defaults when only the method is
// given, every key mapped, the method through its table, one-line errors
// naming the file and the key for every bad value, keys that would be
// ignored refused, and the sections it cannot be combined with.
#include <gtest/gtest.h>

#include <string>

#include "shard/spec/job_config.h"

namespace shard {
namespace {

std::string Job(const std::string& preference,
                const std::string& data = "data: {jsonl: data/pairs.jsonl, tokenizer: byte, seq_len: 64}\n") {
  return "name: prefer\n"
         "model: {preset: tiny}\n" +
         data +
         "train: {steps: 10, global_batch: 4, micro_batch: 2}\n"
         "parallel: {world_size: 2}\n" +
         preference;
}

void ExpectRefused(const std::string& yaml, std::initializer_list<std::string> parts) {
  auto job = ParseJobConfig(yaml, "job.yaml");
  ASSERT_FALSE(job.ok()) << yaml;
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = job.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "missing '" << p << "' in: " << m;
}

TEST(PreferenceConfig, AbsentMeansTheSftObjective) {
  auto job = ParseJobConfig(Job(""), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_FALSE(job->preference.enabled());
  EXPECT_STREQ(PreferenceMethodName(job->preference.method), "none");
}

TEST(PreferenceConfig, DefaultsAreTrls) {
  for (auto [name, method] : {std::pair{"dpo", PreferenceMethod::kDpo}, std::pair{"ipo", PreferenceMethod::kIpo},
                              std::pair{"orpo", PreferenceMethod::kOrpo}}) {
    auto job = ParseJobConfig(Job(std::string("preference: {method: ") + name + "}\n"), "job.yaml");
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    const PreferenceConfig& p = job->preference;
    EXPECT_EQ(p.method, method);
    EXPECT_STREQ(PreferenceMethodName(p.method), name);
    EXPECT_DOUBLE_EQ(p.beta, 0.1);
    EXPECT_DOUBLE_EQ(p.label_smoothing, 0.0);
    EXPECT_DOUBLE_EQ(p.orpo_lambda, 0.1);
    EXPECT_EQ(p.needs_reference(), method != PreferenceMethod::kOrpo);
  }
}

TEST(PreferenceConfig, EveryKeyMapsAndOverrides) {
  auto dpo = ParseJobConfig(Job("preference: {method: dpo, beta: 0.5, label_smoothing: 0.2}\n"), "job.yaml");
  ASSERT_TRUE(dpo.ok()) << dpo.status().ToString();
  EXPECT_DOUBLE_EQ(dpo->preference.beta, 0.5);
  EXPECT_DOUBLE_EQ(dpo->preference.label_smoothing, 0.2);
  auto orpo = ParseJobConfig(Job("preference:\n  method: orpo\n  beta: 0.25\n  orpo_lambda: 1.5\n"), "job.yaml");
  ASSERT_TRUE(orpo.ok()) << orpo.status().ToString();
  EXPECT_DOUBLE_EQ(orpo->preference.beta, 0.25);
  EXPECT_DOUBLE_EQ(orpo->preference.orpo_lambda, 1.5);
  auto over = ParseJobConfig(Job("preference: {method: dpo}\n"), "job.yaml", {"preference.method=ipo",
                                                                              "preference.beta=0.05"});
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  EXPECT_EQ(over->preference.method, PreferenceMethod::kIpo);
  EXPECT_DOUBLE_EQ(over->preference.beta, 0.05);
}

TEST(PreferenceConfig, BadValuesAreOneLineErrorsNamingTheKey) {
  ExpectRefused(Job("preference: {beta: 0.1}\n"), {"job.yaml", "preference.method", "required", "dpo, ipo or orpo"});
  ExpectRefused(Job("preference: {method: kto}\n"), {"job.yaml", "preference.method", "'kto'", "dpo, ipo, orpo"});
  ExpectRefused(Job("preference: {method: dpo, beta: 0}\n"), {"job.yaml", "preference.beta", "positive"});
  ExpectRefused(Job("preference: {method: dpo, beta: -1}\n"), {"preference.beta"});
  ExpectRefused(Job("preference: {method: dpo, beta: .nan}\n"), {"preference.beta"});
  ExpectRefused(Job("preference: {method: dpo, beta: lots}\n"), {"preference.beta", "a number"});
  ExpectRefused(Job("preference: {method: dpo, label_smoothing: 0.5}\n"), {"preference.label_smoothing", "[0, 0.5)"});
  ExpectRefused(Job("preference: {method: dpo, label_smoothing: -0.1}\n"), {"preference.label_smoothing"});
  ExpectRefused(Job("preference: {method: orpo, orpo_lambda: -1}\n"), {"preference.orpo_lambda", ">= 0"});
  ExpectRefused(Job("preference: {method: dpo, gamma: 1}\n"), {"job.yaml", "preference.gamma"});
  ExpectRefused(Job("preference: dpo\n"), {"job.yaml", "preference"});
  // An override is held to the same rules.
  auto over = ParseJobConfig(Job("preference: {method: dpo}\n"), "job.yaml", {"preference.beta=-2"});
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("preference.beta"), std::string::npos) << over.status().ToString();
}

// A key that the chosen method would silently ignore is refused, naming it.
TEST(PreferenceConfig, KeysOfAnotherMethodAreRefused) {
  ExpectRefused(Job("preference: {method: ipo, label_smoothing: 0.1}\n"),
                {"preference.label_smoothing", "only applies to method dpo"});
  ExpectRefused(Job("preference: {method: orpo, label_smoothing: 0.1}\n"), {"preference.label_smoothing"});
  ExpectRefused(Job("preference: {method: dpo, orpo_lambda: 0.2}\n"),
                {"preference.orpo_lambda", "only applies to method orpo"});
}

TEST(PreferenceConfig, TokenStreamJobsAndTrainOnAllAreRefused) {
  ExpectRefused(Job("preference: {method: dpo}\n", "data: {tokens: data/tokens.u32, seq_len: 16}\n"),
                {"job.yaml", "preference", "data.tokens"});
  ExpectRefused(Job("preference: {method: orpo}\n",
                    "data: {jsonl: data/pairs.jsonl, tokenizer: byte, seq_len: 64, train_on: all}\n"),
                {"job.yaml", "data.train_on", "preference"});
}

// data.format: preference belongs to a preference: job, and a preference:
// job reads nothing else.
TEST(PreferenceConfig, DataFormatPreferenceGoesWithTheSection) {
  const std::string pairs = "data: {jsonl: p.jsonl, tokenizer: byte, seq_len: 64, format: preference}\n";
  auto job = ParseJobConfig(Job("preference: {method: dpo}\n", pairs), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->data.format, SftFormat::kPreference);
  ExpectRefused(Job("", pairs), {"job.yaml", "data.format: preference", "preference: section"});
  ExpectRefused(Job("preference: {method: ipo}\n",
                    "data: {jsonl: p.jsonl, tokenizer: byte, seq_len: 64, format: alpaca}\n"),
                {"job.yaml", "data.format: alpaca", "pairs"});
}

}  // namespace
}  // namespace shard
