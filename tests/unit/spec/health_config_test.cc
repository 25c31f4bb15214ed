// The job file's health: section: the defaults when absent, every key read
// (from the file and from --set), and every bad value a one-line error naming
// the file and the key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shard/spec/job_config.h"

namespace shard {
namespace {

std::string Job(const std::string& extra = "") {
  return "name: tune\n"
         "model: {preset: tiny}\n"
         "data: {tokens: data/tokens.u32, seq_len: 16}\n"
         "train: {steps: 10, global_batch: 6, micro_batch: 2}\n"
         "parallel: {world_size: 3}\n" +
         extra;
}

TEST(HealthConfigTest, AbsentMeansTheDefaults) {
  auto job = ParseJobConfig(Job(), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_DOUBLE_EQ(job->health.straggler_ratio, 1.5);
  EXPECT_EQ(job->health.straggler_window, 20);
  EXPECT_EQ(job->health.straggler_action, StragglerAction::kNone);
}

TEST(HealthConfigTest, StragglerActionIsNoneOrRestart) {
  auto job = ParseJobConfig(Job("health: {straggler_action: restart}\n"), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->health.straggler_action, StragglerAction::kRestart);
  job = ParseJobConfig(Job(), "job.yaml", {"health.straggler_action=none"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->health.straggler_action, StragglerAction::kNone);
}

TEST(HealthConfigTest, BothKeysAreRead) {
  auto job = ParseJobConfig(Job("health: {straggler_ratio: 2.25, straggler_window: 7}\n"), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_DOUBLE_EQ(job->health.straggler_ratio, 2.25);
  EXPECT_EQ(job->health.straggler_window, 7);
  job = ParseJobConfig(Job(), "job.yaml", {"health.straggler_window=1", "health.straggler_ratio=100"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->health.straggler_window, 1);
  EXPECT_DOUBLE_EQ(job->health.straggler_ratio, 100);
}

TEST(HealthConfigTest, BadValuesAreOneLineErrorsNamingTheKey) {
  for (const auto& [set, key] : std::vector<std::pair<std::string, std::string>>{
           {"health.straggler_ratio=1", "health.straggler_ratio"},
           {"health.straggler_ratio=0.5", "health.straggler_ratio"},
           {"health.straggler_ratio=-2", "health.straggler_ratio"},
           {"health.straggler_ratio=.nan", "health.straggler_ratio"},
           {"health.straggler_ratio=.inf", "health.straggler_ratio"},
           {"health.straggler_ratio=101", "health.straggler_ratio"},
           {"health.straggler_ratio=fast", "health.straggler_ratio"},
           {"health.straggler_window=0", "health.straggler_window"},
           {"health.straggler_window=-20", "health.straggler_window"},
           {"health.straggler_window=100001", "health.straggler_window"},
           {"health.straggler_window=2.5", "health.straggler_window"},
           {"health.straggler_action=kill", "health.straggler_action"},
           {"health.straggler_windows=20", "health.straggler_windows"}}) {
    auto job = ParseJobConfig(Job(), "job.yaml", {set});
    ASSERT_FALSE(job.ok()) << set;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << set;
    const std::string& m = job.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("job.yaml"), std::string::npos) << m;
    EXPECT_NE(m.find(key), std::string::npos) << set << ": " << m;
  }
  auto job = ParseJobConfig(Job("health: [1.5]\n"), "job.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("health"), std::string::npos) << job.status().ToString();
}

}  // namespace
}  // namespace shard
