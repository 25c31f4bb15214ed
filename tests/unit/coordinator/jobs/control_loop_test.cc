// The control loop alone, over the parts and the fake launcher: a Tick
// launches a queued job, a cancel that arrives during the launch wins and its
// workers are stopped at once, a draining attempt is killed after the grace,
// a held failure fires at its deadline, and a silent rank fails the attempt.
#include "coordinator/jobs/control_loop.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "shard/spec/run_fingerprint.h"
#include "tests/unit/ckpt/ckpt_protocol_util.h"
#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

// Runs `during` inside Launch, as an RPC on another thread would meanwhile.
class HookLauncher : public FakeLauncher {
 public:
  StatusOr<std::vector<int>> Launch(const LaunchRequest& req) override {
    if (during) during();
    return FakeLauncher::Launch(req);
  }
  std::function<void()> during;
};

class ControlLoopTest : public JobPartsTest {
 protected:
  void SetUp() override {
    JobPartsTest::SetUp();
    runner_->AddLauncher(&hook_);
    loop_ = std::make_unique<ControlLoop>(opts_, table_.get(), runner_.get(), attempts_.get(), sched_.get(),
                                          &rendezvous_);
  }
  Job& Queued() {
    Job& j = AddJob();
    j.launcher = &hook_;
    return j;
  }
  // A queued job whose checkpoint.dir is a scratch folder and whose
  // checkpoint.resume is `resume`; its checkpoint job folder in *job_dir.
  Job& QueuedWithCheckpoints(const std::string& resume, std::string* job_dir) {
    Job& j = Queued();
    auto lock = table_->Lock();
    j.config.checkpoint.dir = Path("ckpt");
    j.config.checkpoint.resume = resume;
    *job_dir = CheckpointDirOf(j);
    return j;
  }
  std::string Fingerprint(const Job& j) const { return shard::RunFingerprint(shard::RunKeysOf(j.config)); }
  shard::ResumePlan PlanOf(const Job& j) {
    auto lock = table_->Lock();
    return j.ckpt.Plan("", false, {});
  }
  HookLauncher hook_;
  std::unique_ptr<ControlLoop> loop_;
};

// The first attempt's resume is chosen by the coordinator (issue 40 item 2):
// the plan every worker is handed names the step, never "auto".
TEST_F(ControlLoopTest, TheFirstAttemptsPlanNamesTheNewestStepOfThisRun) {
  std::string dir;
  Job& j = QueuedWithCheckpoints("auto", &dir);
  shard::ckpt_testing::MakeCommittedStep(dir, 2, 2, Fingerprint(j));
  const std::string newest = shard::ckpt_testing::MakeCommittedStep(dir, 4, 2, Fingerprint(j));
  loop_->Tick();
  ASSERT_EQ(j.state, v1::LAUNCHING) << j.reason;
  const shard::ResumePlan plan = PlanOf(j);
  EXPECT_EQ(plan.resume_from, newest);
  EXPECT_EQ(plan.step, 4);
  EXPECT_TRUE(plan.this_run_only);
  EXPECT_EQ(plan.tier, shard::CheckpointTier::kDisk);
}

TEST_F(ControlLoopTest, TheFirstAttemptsPlanIsScratchForNoneAndAFreshRun) {
  std::string dir;
  Job& fresh = QueuedWithCheckpoints("auto", &dir);
  loop_->Tick();
  EXPECT_EQ(PlanOf(fresh).resume_from, "none");
  EXPECT_EQ(PlanOf(fresh).step, 0);
  Job& none = QueuedWithCheckpoints("none", &dir);
  shard::ckpt_testing::MakeCommittedStep(dir, 2, 2, Fingerprint(none));
  loop_->Tick();
  ASSERT_EQ(none.state, v1::LAUNCHING) << none.reason;
  EXPECT_EQ(PlanOf(none).resume_from, "none");
}

TEST_F(ControlLoopTest, AutoWithOnlyAnotherRunsStepsFailsTheJobAtLaunchInOneLine) {
  std::string dir;
  Job& j = QueuedWithCheckpoints("auto", &dir);
  shard::ckpt_testing::MakeCommittedStep(dir, 2, 2, "00000000000000aa");
  loop_->Tick();
  EXPECT_EQ(j.state, v1::FAILED);
  EXPECT_TRUE(hook_.launches.empty());
  EXPECT_NE(j.reason.find("holds checkpoints of another run"), std::string::npos) << j.reason;
  EXPECT_NE(j.reason.find("checkpoint.resume: none"), std::string::npos) << j.reason;
  EXPECT_EQ(j.reason.find('\n'), std::string::npos) << j.reason;
}

TEST_F(ControlLoopTest, ATickLaunchesAQueuedJob) {
  Job& j = Queued();
  loop_->Tick();
  ASSERT_EQ(hook_.launches.size(), 1u);
  EXPECT_EQ(hook_.launches[0].job_id, j.id);
  EXPECT_EQ(j.state, v1::LAUNCHING);
  EXPECT_EQ(j.ranks[1].pid, 4001);
}

TEST_F(ControlLoopTest, ACancelDuringTheLaunchWins) {
  Job& j = Queued();
  hook_.during = [&] {
    auto lock = table_->Lock();  // free while the launcher works
    attempts_->End(j);
    table_->SetState(j, v1::CANCELLED, "cancelled", "cancelled by the user");
  };
  loop_->Tick();
  EXPECT_EQ(j.state, v1::CANCELLED);
  EXPECT_EQ(hook_.CountTerminates(j.id, 1, false), 1);  // in the same Tick, after the launch
  EXPECT_EQ(j.ranks[0].pid, 4000);                     // recorded: a restarted coordinator stops them too
}

TEST_F(ControlLoopTest, ADrainingAttemptIsKilledAfterTheGraceAndForgottenWhenGone) {
  Job& j = Queued();
  loop_->Tick();
  {
    auto lock = table_->Lock();
    attempts_->Fail(j, "test", false);
  }
  loop_->Tick();
  EXPECT_EQ(hook_.CountTerminates(j.id, 1, true), 0);
  now_ms_ += 5000;
  loop_->Tick();
  EXPECT_EQ(hook_.CountTerminates(j.id, 1, true), 1);
  hook_.SetRunning(j.id, 1, 0);
  loop_->Tick();
  EXPECT_EQ(j.draining_attempt, 0);
}

TEST_F(ControlLoopTest, AHeldFailureFiresAtItsDeadline) {
  Job& j = Queued();
  loop_->Tick();
  {
    auto lock = table_->Lock();
    j.health.pending_failure = "rank 1 failed: peer gone";
    j.health.pending_deadline_ms = now_ms_ + 1000;
  }
  loop_->Tick();
  EXPECT_EQ(j.state, v1::LAUNCHING);
  now_ms_ += 1000;
  loop_->Tick();
  EXPECT_EQ(j.state, v1::RESTARTING);
  EXPECT_EQ(j.reason.rfind("rank 1 failed: peer gone; restart 1 of 2", 0), 0u) << j.reason;
}

TEST_F(ControlLoopTest, ARankThatNeverRegistersFailsTheAttempt) {
  opts_.register_timeout_s = 30;
  Job& j = Queued();
  loop_->Tick();
  now_ms_ += 31000;
  loop_->Tick();
  EXPECT_EQ(j.state, v1::RESTARTING);
  EXPECT_NE(j.reason.find("rank 0"), std::string::npos) << j.reason;
}

TEST_F(ControlLoopTest, StartAndStopRunTheThreads) {
  opts_.tick_s = 0.01;
  opts_.stall_forgive_s = 5;
  Job& j = Queued();
  loop_->Start();
  for (int i = 0; i < 500; ++i) {
    {
      auto lock = table_->Lock();
      if (j.state == v1::LAUNCHING) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  loop_->Stop();
  EXPECT_EQ(j.state, v1::LAUNCHING);
}

}  // namespace
}  // namespace shardd::testing
