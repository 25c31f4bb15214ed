// Issue 18 item 3 through the Trainer (one rank, CPU): a run's checkpoints
// carry its fingerprint; auto-resume never takes another run's steps (it
// refuses, naming what differs), an explicit STEP_DIR of another run is
// allowed, a step without a fingerprint (an older shardd) is resumed as
// unknown, and a job already at train.steps trains nothing and says so.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "shard/ckpt/catalog.h"
#include "shard/common/file_util.h"
#include "shard/spec/run_fingerprint.h"
#include "shard/train/trainer.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

class RunIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/run_identity_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    std::mt19937 rng(3);
    std::vector<uint32_t> t(4000);
    for (auto& x : t) x = rng() % 256;
    std::ofstream(dir_ + "/tokens.u32", std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  }
  void TearDown() override { fs::remove_all(dir_); }

  StatusOr<JobConfig> Job(std::vector<std::string> sets) {
    const std::string yaml = "name: r\nmodel: {preset: tiny}\ndata: {tokens: " + dir_ +
                             "/tokens.u32, seq_len: 16}\ntrain: {steps: 4, global_batch: 2, micro_batch: 2, lr: "
                             "3.0e-3, log_every: 1000}\ncheckpoint: {dir: " + dir_ +
                             "/ckpt, every_steps: 2, keep_last: 2, async: false}\nresources: {device: cpu}\n";
    return ParseJobConfig(yaml, "job.yaml", sets);
  }
  // Creates and runs a trainer; returns it (or the error of Create/Run).
  StatusOr<std::unique_ptr<Trainer>> RunJob(std::vector<std::string> sets) {
    ASSIGN_OR_RETURN(JobConfig job, Job(sets));
    ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::Create(job));
    RETURN_IF_ERROR(t->Run());
    return t;
  }
  std::string JobDir() const { return dir_ + "/ckpt/r"; }
  std::string dir_;
};

TEST_F(RunIdentityTest, AJobAlreadyAtItsLastStepTrainsNothingAndSaysSo) {
  auto first = RunJob({});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE((*first)->nothing_trained());
  EXPECT_TRUE((*first)->resumed_from().empty());
  // The manifest's fingerprint is that of the job as written (precision auto,
  // not the fp32 the trainer resolved it to): what the coordinator computes
  // from the same job file when it picks a restart step.
  auto m = Manifest::FromJson(*ReadFileToString(JobDir() + "/" + StepDirName(4) + "/COMMITTED"), "COMMITTED");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->run_fingerprint, RunFingerprint(RunKeysOf(*Job({}))));
  EXPECT_EQ(m->run_keys.at("train.precision"), "auto");
  auto again = RunJob({});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->nothing_trained());
  EXPECT_EQ((*again)->step(), 4);
  EXPECT_EQ((*again)->resumed_from(), JobDir() + "/" + StepDirName(4));
  // Raising train.steps continues the same run (steps are not part of it).
  auto longer = RunJob({"train.steps=6"});
  ASSERT_TRUE(longer.ok()) << longer.status().ToString();
  EXPECT_FALSE((*longer)->nothing_trained());
  EXPECT_EQ((*longer)->step(), 6);
}

TEST_F(RunIdentityTest, AutoResumeRefusesAnotherRunsStepsNamingTheDifference) {
  ASSERT_TRUE(RunJob({}).ok());
  auto other = RunJob({"train.lr=1e-3", "train.steps=8"});
  ASSERT_FALSE(other.ok()) << "resumed another run's step 4 silently";
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument) << other.status().ToString();
  const std::string msg = other.status().message();
  EXPECT_NE(msg.find("holds checkpoints of another run"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.lr 0.003 -> 0.001"), std::string::npos) << msg;
  EXPECT_NE(msg.find("new name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checkpoint.resume: none"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST_F(RunIdentityTest, ExplicitResumeOfAnotherRunIsAllowed) {
  ASSERT_TRUE(RunJob({}).ok());
  const std::string step4 = JobDir() + "/" + StepDirName(4);
  auto other = RunJob({"train.lr=1e-3", "train.steps=6", "checkpoint.resume=" + step4});
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ((*other)->resumed_from(), step4);
  EXPECT_EQ((*other)->step(), 6);
}

TEST_F(RunIdentityTest, ARunBesideAnotherKeepsToItsOwnStepsAndSparesTheOthers) {
  ASSERT_TRUE(RunJob({"train.steps=8", "checkpoint.every_steps=4"}).ok());  // run A: steps 4, 8
  // Run B starts over in the same directory and checkpoints steps 2 and 4 (its
  // step 4 replaces A's), keeping 1 of its own.
  ASSERT_TRUE(RunJob({"train.lr=1e-3", "checkpoint.resume=none", "checkpoint.keep_last=1"}).ok());
  std::vector<int64_t> left;
  auto steps = ListSteps(JobDir());
  ASSERT_TRUE(steps.ok());
  for (const auto& s : *steps) left.push_back(s.step);
  EXPECT_EQ(left, (std::vector<int64_t>{4, 8})) << "B's step 2 went; A's step 8 stayed";
  // B, restarted with auto, resumes its own step 4, not A's newer step 8.
  auto b = RunJob({"train.lr=1e-3", "train.steps=6"});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->resumed_from(), JobDir() + "/" + StepDirName(4));
}

TEST_F(RunIdentityTest, AStepWithoutAFingerprintIsResumedAsUnknown) {
  ASSERT_TRUE(RunJob({}).ok());
  // As an older shardd wrote it: no "run" section.
  for (int64_t s : {2, 4}) {
    const std::string path = JobDir() + "/" + StepDirName(s) + "/COMMITTED";
    auto j = nlohmann::json::parse(*ReadFileToString(path));
    j.erase("run");
    ASSERT_TRUE(WriteFileAtomic(path, j.dump(2)).ok());
  }
  auto resumed = RunJob({"train.lr=1e-3", "train.steps=6"});
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ((*resumed)->resumed_from(), JobDir() + "/" + StepDirName(4));
}

// Each rank picks its resume step from the filesystem on its own; where they
// see it differently (a stale shared filesystem; here: rank 0 is told none, rank
// 1 a step) every
// rank refuses at once with one error, and the fresh rank makes the same one
// agreement call as the others rather than skipping it (which left them in a
// collective it never joined).
TEST_F(RunIdentityTest, RanksThatChoseDifferentStepsAllRefuse) {
  ASSERT_TRUE(RunJob({}).ok());  // one rank, checkpoints at steps 2 and 4
  const std::vector<std::string> resume = {"checkpoint.resume=none", "checkpoint.resume=" + JobDir() + "/step_00000004"};
  std::vector<Status> got(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto job = Job({resume[r], "parallel.world_size=2", "parallel.comm_timeout_s=20", "train.global_batch=4"});
      if (!job.ok()) {
        got[r] = job.status();
        return;
      }
      DistContext d;
      d.rank = r;
      d.world = 2;
      d.comm_backend = "local";
      d.prefix = "disagree/";
      auto t = Trainer::Create(*job, d);
      got[r] = t.status();
    });
  }
  for (auto& th : ranks) th.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].code(), StatusCode::kFailedPrecondition) << "rank " << r << ": " << got[r].ToString();
    EXPECT_NE(got[r].message().find("ranks chose different checkpoints"), std::string::npos) << got[r].ToString();
  }
  EXPECT_NE(got[0].message().find("a fresh start"), std::string::npos) << got[0].ToString();
  EXPECT_NE(got[1].message().find("step_00000004"), std::string::npos) << got[1].ToString();
}

}  // namespace
}  // namespace shard
