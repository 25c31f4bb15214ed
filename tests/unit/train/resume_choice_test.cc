// Which step checkpoint.resume: auto takes across the two tiers, and that
// every fallback is said (issue 39 item 6): a damaged newest memory step
// falls back to the previous memory step with a "skipping step N (memory)"
// line; every memory step damaged and no disk step starts from step 0 with a
// line that says why; a fresh run and another run's leftovers say nothing.
#include "shard/train/resume_choice.h"

#include <gtest/gtest.h>

#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard::ckpt_testing {
namespace {

class ResumeChoiceTest : public ProtocolTest {
 protected:
  std::string Disk() const { return Path("disk/job"); }
  std::string Memory() const { return Path("shm/job-0123"); }
  const RunKeys mine_ = {{"train.lr", "0.001"}};  // what MakeCommittedStep records for a non-"aa" run
  const std::string fp_ = RunFingerprint(mine_);
};

TEST_F(ResumeChoiceTest, AFlippedByteInTheNewestMemoryStepFallsBackToThePreviousOneAndSaysSo) {
  MakeCommittedStep(Memory(), 520, 2, fp_);
  const std::string newest = MakeCommittedStep(Memory(), 530, 2, fp_);
  FlipByte(newest + "/" + ShardFileName(1, 2), -3);
  auto c = ChooseResumeStep("auto", Disk(), mine_, Memory());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->step_dir, Memory() + "/" + StepDirName(520));
  EXPECT_EQ(c->tier, CheckpointTier::kMemory);
  ASSERT_EQ(c->events.size(), 1u);
  EXPECT_EQ(c->events[0].rfind("skipping step 530 (memory): ", 0), 0u) << c->events[0];
  EXPECT_NE(c->events[0].find(ShardFileName(1, 2)), std::string::npos) << "names the damaged shard: " << c->events[0];
}

TEST_F(ResumeChoiceTest, EveryMemoryStepDamagedAndNoDiskStepStartsFromStepZeroSayingWhy) {
  for (int64_t step : {520, 530}) {
    const std::string dir = MakeCommittedStep(Memory(), step, 2, fp_);
    FlipByte(dir + "/" + ShardFileName(0, 2), -3);
  }
  auto c = ChooseResumeStep("auto", Disk(), mine_, Memory());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->step_dir, "");
  ASSERT_EQ(c->events.size(), 3u);
  EXPECT_EQ(c->events[0].rfind("skipping step 530 (memory): ", 0), 0u) << c->events[0];
  EXPECT_EQ(c->events[1].rfind("skipping step 520 (memory): ", 0), 0u) << c->events[1];
  EXPECT_EQ(c->events[2].rfind("starting from step 0: the 2 committed memory step(s) of this run", 0), 0u)
      << c->events[2];
  EXPECT_NE(c->events[2].find("the disk tier holds no committed step"), std::string::npos) << c->events[2];
}

TEST_F(ResumeChoiceTest, ADamagedMemoryStepFallsBackToDiskSayingWhichWasSkipped) {
  MakeCommittedStep(Disk(), 500, 2, fp_);
  const std::string newest = MakeCommittedStep(Memory(), 530, 2, fp_);
  FlipByte(newest + "/" + ShardFileName(1, 2), -3);
  auto c = ChooseResumeStep("auto", Disk(), mine_, Memory());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->step_dir, Disk() + "/" + StepDirName(500));
  EXPECT_EQ(c->tier, CheckpointTier::kDisk);
  ASSERT_EQ(c->events.size(), 1u);
  EXPECT_EQ(c->events[0].rfind("skipping step 530 (memory): ", 0), 0u) << c->events[0];
}

TEST_F(ResumeChoiceTest, AFreshRunOrAnotherRunsLeftoversSayNothing) {
  auto fresh = ChooseResumeStep("auto", Disk(), mine_, Memory());
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->step_dir, "");
  EXPECT_TRUE(fresh->events.empty());
  MakeCommittedStep(Memory(), 530, 2, "00000000000000aa");  // another run's tmpfs leftovers
  auto other = ChooseResumeStep("auto", Disk(), mine_, Memory());
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->step_dir, "");
  EXPECT_TRUE(other->events.empty());
}

}  // namespace
}  // namespace shard::ckpt_testing
