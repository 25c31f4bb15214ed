// checkpoint.memory: (the in-memory checkpoint tier): off when absent, every
// key read, each bad value a one-line error naming the key, and the job
// folder rule (one folder per disk folder, stable, under the configured root).
#include <gtest/gtest.h>
#include <unistd.h>

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

TEST(MemoryTierConfigTest, AbsentMeansOff) {
  auto job = ParseJobConfig(Job(), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_FALSE(job->checkpoint.memory.enabled());
  EXPECT_EQ(job->checkpoint.memory.keep_last, 2);
  EXPECT_EQ(job->checkpoint.memory.replicas, 1);
}

TEST(MemoryTierConfigTest, EveryKeyIsRead) {
  auto job = ParseJobConfig(
      Job("checkpoint: {every_steps: 200, memory: {every_steps: 5, dir: /dev/shm/x, keep_last: 4, replicas: 0}}\n"),
      "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->checkpoint.every_steps, 200);
  EXPECT_TRUE(job->checkpoint.memory.enabled());
  EXPECT_EQ(job->checkpoint.memory.every_steps, 5);
  EXPECT_EQ(job->checkpoint.memory.dir, "/dev/shm/x");
  EXPECT_EQ(job->checkpoint.memory.keep_last, 4);
  EXPECT_EQ(job->checkpoint.memory.replicas, 0);
  job = ParseJobConfig(Job(), "job.yaml", {"checkpoint.memory.every_steps=7"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->checkpoint.memory.every_steps, 7);
}

TEST(MemoryTierConfigTest, BadValuesAreOneLineErrorsNamingTheKey) {
  for (const auto& [set, key] : std::vector<std::pair<std::string, std::string>>{
           {"checkpoint.memory.every_steps=-1", "checkpoint.memory.every_steps"},
           {"checkpoint.memory.every_steps=often", "checkpoint.memory.every_steps"},
           {"checkpoint.memory.keep_last=0", "checkpoint.memory.keep_last"},
           {"checkpoint.memory.keep_last=101", "checkpoint.memory.keep_last"},
           {"checkpoint.memory.replicas=2", "checkpoint.memory.replicas"},
           {"checkpoint.memory.replicas=-1", "checkpoint.memory.replicas"},
           {"checkpoint.memory.dir=relative/x", "checkpoint.memory.dir"},
           {"checkpoint.memory.every_step=5", "checkpoint.memory.every_step"}}) {
    auto job = ParseJobConfig(Job(), "job.yaml", {set});
    ASSERT_FALSE(job.ok()) << set;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << set;
    const std::string& m = job.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(key), std::string::npos) << set << ": " << m;
  }
}

TEST(MemoryTierConfigTest, PeftJobsAreRefused) {
  auto job = ParseJobConfig(Job("peft: {method: lora}\n"), "job.yaml", {"checkpoint.memory.every_steps=5"});
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("checkpoint.memory.every_steps"), std::string::npos)
      << job.status().message();
}

TEST(MemoryTierConfigTest, JobFolderIsPerDiskFolderAndStable) {
  auto job = ParseJobConfig(Job(), "job.yaml", {"checkpoint.memory.every_steps=5"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string a = MemoryCheckpointJobDir(*job, "/tmp/work_a");
  // The default root is the user's own (another user's /dev/shm/shardd is never shared).
  const std::string root = "/dev/shm/shardd-" + std::to_string(::geteuid());
  EXPECT_EQ(DefaultMemoryTierRoot(), root);
  EXPECT_EQ(a.rfind(root + "/tune-", 0), 0u) << a;
  EXPECT_EQ(a.size(), (root + "/tune-").size() + 16) << a;
  EXPECT_EQ(MemoryCheckpointJobDir(*job, "/tmp/work_a"), a);
  EXPECT_EQ(MemoryCheckpointJobDir(*job, "/tmp/work_a/"), a);
  EXPECT_NE(MemoryCheckpointJobDir(*job, "/tmp/work_b"), a);
  job->checkpoint.memory.dir = "/dev/shm/mine";
  EXPECT_EQ(MemoryCheckpointJobDir(*job, "/tmp/work_a").rfind("/dev/shm/mine/tune-", 0), 0u);
}

// Issue 39 item 4: a coordinator's job folder carries its id, and no two jobs
// (the same name and workdir, or two coordinators' jobs of one id) share one.
TEST(MemoryTierConfigTest, ACoordinatorsJobFolderIsPerJob) {
  auto job = ParseJobConfig(Job(), "job.yaml", {"checkpoint.memory.every_steps=5"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string one = MemoryCheckpointJobDir(*job, "/tmp/work_a", "tune-1", 1000);
  EXPECT_EQ(one.rfind(DefaultMemoryTierRoot() + "/tune-1-", 0), 0u) << one;
  EXPECT_EQ(MemoryCheckpointJobDir(*job, "/tmp/work_a", "tune-1", 1000), one) << "stable for one job";
  EXPECT_NE(MemoryCheckpointJobDir(*job, "/tmp/work_a", "tune-2", 1000), one);
  EXPECT_NE(MemoryCheckpointJobDir(*job, "/tmp/work_a", "tune-1", 2000), one) << "another coordinator's tune-1";
  EXPECT_NE(MemoryCheckpointJobDir(*job, "/tmp/work_a"), one) << "a standalone run's folder";
}

}  // namespace
}  // namespace shard
