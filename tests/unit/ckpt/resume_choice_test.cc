// Which step checkpoint.resume: auto takes across the two tiers, and that
// every fallback is said (issue 39 item 6): a damaged newest memory step
// falls back to the previous memory step with a "skipping step N (memory)"
// line; every memory step damaged and no disk step starts from step 0 with a
// line that says why; a fresh run and another run's leftovers say nothing.
#include "shard/ckpt/resume_choice.h"

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

// A trainer handed a step verifies it and never picks another (issue 40 item 2).
TEST_F(ResumeChoiceTest, AHandedStepIsVerifiedNeverReplaced) {
  const std::string mine = MakeCommittedStep(Disk(), 500, 2, fp_);
  MakeCommittedStep(Disk(), 600, 2, fp_);  // newer: not taken, the plan named 500
  auto c = VerifyHandedStep(mine, mine_, Memory(), /*this_run_only=*/true);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->step_dir, mine);
  EXPECT_FALSE(c->verified) << "its checksums are read as it loads";
  EXPECT_EQ(c->note, "");
  auto scratch = VerifyHandedStep("none", mine_, Memory(), true);
  ASSERT_TRUE(scratch.ok());
  EXPECT_EQ(scratch->step_dir, "");
  // Gone since it was planned: refused, not replaced by the newest.
  auto gone = VerifyHandedStep(Disk() + "/" + StepDirName(700), mine_, Memory(), true);
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status().ToString();
}

TEST_F(ResumeChoiceTest, AnotherRunsStepHandedAsAutosChoiceIsRefusedInOneLine) {
  const std::string other = MakeCommittedStep(Disk(), 500, 2, "00000000000000aa");
  auto c = VerifyHandedStep(other, mine_, "", /*this_run_only=*/true);
  ASSERT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find(other), std::string::npos) << msg;
  EXPECT_NE(msg.find("another run"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.lr"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  // Named by the job file (a STEP_DIR): resumed, with the note that says whose.
  auto named = VerifyHandedStep(other, mine_, "", /*this_run_only=*/false);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_NE(named->note.find("a step of another run"), std::string::npos) << named->note;
  // An unknown run's step (no fingerprint) under auto: resumed with its warning.
  const std::string unknown = MakeCommittedStep(Disk(), 510, 2, "");
  auto u = VerifyHandedStep(unknown, mine_, "", true);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_NE(u->note.find("records no run fingerprint"), std::string::npos) << u->note;
  // A step of the memory folder is said as such.
  const std::string mem = MakeCommittedStep(Memory(), 520, 2, fp_);
  auto m = VerifyHandedStep(mem, mine_, Memory(), true);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->tier, CheckpointTier::kMemory);
}

}  // namespace
}  // namespace shard::ckpt_testing
