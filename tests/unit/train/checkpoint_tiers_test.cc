// The checkpoint tiers a trainer is handed (CheckpointInputs::tiers,
// shard/ckpt/resume_plan.h) instead of an edited JobConfig: the step named in
// them is resumed over the job file's checkpoint.resume, a plan without a
// memory folder keeps no memory tier whatever the job file says, and the
// pure mappings (StandalonePlan, TiersFromPlan) the worker uses in both of
// its modes.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/resume_plan.h"
#include "shard/train/trainer.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {
namespace fs = std::filesystem;

std::string Tokens() { return testing_ranks::RandomTokens("ckpt_tiers", 7); }
std::string NewDir(const std::string& name) { return testing_ranks::NewTempDir("ckpt_tiers_" + name); }

std::string Yaml() {
  return "name: t\nmodel: {preset: tiny}\ndata: {tokens: " + Tokens() +
         ", seq_len: 32}\ntrain: {global_batch: 4, micro_batch: 2, lr: 1.0e-3, log_every: 1000}\n"
         "resources: {device: cpu}\n";
}

std::vector<std::string> Sets(const std::string& disk, const std::string& memory_root, const std::string& resume) {
  return {"parallel.world_size=2", "train.steps=6", "checkpoint.dir=" + disk, "checkpoint.every_steps=2",
          "checkpoint.memory.every_steps=1", "checkpoint.memory.dir=" + memory_root, "checkpoint.resume=" + resume};
}

// Trains both ranks to `until`; returns the step rank 0 began at.
int64_t Train(const std::string& disk, const std::string& memory_root, const std::string& resume,
              const CheckpointTiers& tiers, int64_t until) {
  DistContext base;
  base.tiers = tiers;
  int64_t began = -1;
  const Status st = testing_ranks::OnTrainerRanks(
      Yaml(), 2, Sets(disk, memory_root, resume),
      [&](Trainer& tr, int r) {
        if (r == 0) began = tr.step();
        while (tr.step() < until) {
          auto m = tr.Step();
          ASSERT_TRUE(m.ok()) << "rank " << r << ": " << m.status().ToString();
        }
        ASSERT_TRUE(tr.checkpointer()->Wait().ok());
      },
      base);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return began;
}

bool HasFiles(const std::string& dir) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
    if (it->is_regular_file()) return true;
  return false;
}

TEST(CheckpointTiersTest, TheStepHandedIsResumedOverTheJobFilesChoice) {
  const std::string disk = NewDir("disk"), mem = NewDir("mem");
  EXPECT_EQ(Train(disk, mem, "none", {}, 4), 0);
  ASSERT_TRUE(fs::exists(disk + "/t/" + StepDirName(2) + "/COMMITTED"));
  // The job file says none; the plan names step 2 (not the newest, 4).
  CheckpointTiers tiers;
  tiers.resume = disk + "/t/" + StepDirName(2);
  EXPECT_EQ(Train(disk, mem, "none", tiers, 3), 2);
  // Nothing handed: the job file's none starts over.
  EXPECT_EQ(Train(disk, mem, "none", {}, 1), 0);
}

TEST(CheckpointTiersTest, APlanWithoutAMemoryFolderKeepsNoMemoryTier) {
  const std::string disk = NewDir("disk"), mem = NewDir("mem");
  CheckpointTiers off;
  off.memory = false;  // checkpoint.memory.every_steps stays 1 in the job
  Train(disk, mem, "none", off, 3);
  EXPECT_FALSE(HasFiles(mem)) << "a memory step was written in " << mem;
  EXPECT_TRUE(fs::exists(disk + "/t/" + StepDirName(2) + "/COMMITTED"));
  // The same job with the tier on (the default) writes memory steps.
  const std::string disk2 = NewDir("disk"), mem2 = NewDir("mem");
  Train(disk2, mem2, "none", {}, 3);
  EXPECT_TRUE(HasFiles(mem2));
}

TEST(CheckpointTiersTest, StandalonePlanIsTheJobFilesOwn) {
  const std::string disk = NewDir("disk"), mem = NewDir("mem");
  auto job = ParseJobConfig(Yaml(), "job.yaml", Sets(disk, mem, "auto"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  // Nothing committed: auto plans a fresh start, named as such.
  auto plan = StandalonePlan(*job);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->resume_from, "none");
  EXPECT_EQ(plan->step, 0);
  EXPECT_EQ(plan->memory_dir, MemoryCheckpointJobDir(*job));
  EXPECT_FALSE(plan->memory_per_host);
  CheckpointTiers tiers = TiersFromPlan(*plan, "", "");
  EXPECT_EQ(tiers.resume, "none");
  EXPECT_TRUE(tiers.memory);
  EXPECT_EQ(tiers.memory_dir, MemoryCheckpointJobDir(*job));
  EXPECT_EQ(tiers.memory_depth, 1);
  // A step folder the job file names is taken as it is (any run's).
  job->checkpoint.resume = plan->memory_dir + "/" + StepDirName(7);
  plan = StandalonePlan(*job);
  ASSERT_FALSE(plan.ok()) << "step 7 was never written";
  EXPECT_NE(plan.status().message().find(StepDirName(7)), std::string::npos) << plan.status().ToString();
  job->checkpoint.resume = "none";
  job->checkpoint.memory.every_steps = 0;
  ASSERT_TRUE(StandalonePlan(*job).ok());
  EXPECT_EQ(StandalonePlan(*job)->memory_dir, "");
  EXPECT_FALSE(TiersFromPlan(*StandalonePlan(*job), "", "").memory);
}

TEST(CheckpointTiersTest, StandaloneAutoPlansTheNewestStepWithTheCoordinatorsChooser) {
  const std::string disk = NewDir("disk"), mem = NewDir("mem");
  Train(disk, mem, "none", {}, 4);  // disk steps 2 and 4, memory steps 1..4
  auto job = ParseJobConfig(Yaml(), "job.yaml", Sets(disk, mem, "auto"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::vector<std::string> events;
  auto plan = StandalonePlan(*job, &events);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->step, 4);
  EXPECT_EQ(fs::path(plan->resume_from).filename().string(), StepDirName(4));
  EXPECT_TRUE(plan->this_run_only) << "auto chose it: the trainer checks it is this run's";
  EXPECT_TRUE(events.empty());
  // The trainer resumes exactly that step (it verifies, it does not choose).
  EXPECT_EQ(Train(disk, mem, "auto", TiersFromPlan(*plan, "", ""), 5), 4);
}

TEST(CheckpointTiersTest, AStepOfAnotherRunHandedUnderAutoIsRefused) {
  const std::string disk = NewDir("disk"), mem = NewDir("mem");
  Train(disk, mem, "none", {}, 2);
  const std::string step2 = disk + "/t/" + StepDirName(2);
  ASSERT_TRUE(fs::exists(step2 + "/COMMITTED"));
  // Another run (another lr) handed that step as auto's choice: refused, one line.
  std::vector<std::string> sets = Sets(disk, mem, "auto");
  sets.push_back("train.lr=0.002");
  CheckpointTiers tiers;
  tiers.resume = step2;
  tiers.this_run_only = true;
  const Status st = testing_ranks::OnTrainerRanks(Yaml(), 2, sets, [](Trainer&, int) {}, [&] {
    DistContext d;
    d.tiers = tiers;
    return d;
  }());
  ASSERT_FALSE(st.ok()) << "another run's step was resumed as auto's choice";
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("another run"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("train.lr"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.ToString();
  // The same step named by the job file (a STEP_DIR: any run's) is resumed.
  tiers.this_run_only = false;
  int64_t began = -1;
  const Status named = testing_ranks::OnTrainerRanks(Yaml(), 2, sets, [&](Trainer& tr, int r) {
    if (r == 0) began = tr.step();
  }, [&] {
    DistContext d;
    d.tiers = tiers;
    return d;
  }());
  EXPECT_TRUE(named.ok()) << named.ToString();
  EXPECT_EQ(began, 2);
}

TEST(CheckpointTiersTest, TiersFromACoordinatorsPlan) {
  ResumePlan plan;
  plan.resume_from = "/ck/t/" + StepDirName(20);
  plan.memory_dir = "/shm/t-1";
  plan.memory_per_host = true;
  // The hosts assembled memory step 25: it is resumed, from this host's folder.
  CheckpointTiers t = TiersFromPlan(plan, "/shm/t-1/host-a", "/shm/t-1/host-a/" + StepDirName(25));
  EXPECT_EQ(t.resume, "/shm/t-1/host-a/" + StepDirName(25));
  EXPECT_EQ(t.memory_dir, "/shm/t-1/host-a");
  EXPECT_EQ(t.memory_depth, 2);
  EXPECT_TRUE(t.memory);
  // None assembled: the plan's disk choice.
  EXPECT_EQ(TiersFromPlan(plan, "/shm/t-1/host-a", "").resume, plan.resume_from);
  // No memory folder handed: no memory tier.
  plan.memory_dir.clear();
  plan.memory_per_host = false;
  t = TiersFromPlan(plan, "", "");
  EXPECT_FALSE(t.memory);
  EXPECT_EQ(t.memory_depth, 1);
}

}  // namespace
}  // namespace shard
