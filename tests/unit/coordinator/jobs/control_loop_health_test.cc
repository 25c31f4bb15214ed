// The ControlLoop's health checks on a fake clock, over the owners of
// job_owners_test_util.h: a rank unregistered past the register timeout, silent
// past the heartbeat deadline, or heartbeating without progress past the hang
// limit restarts the attempt; known step times shrink the hang limit to
// max(20 x step, 30 s).
#include <gtest/gtest.h>

#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class ControlLoopHealthTest : public JobOwnersTest {};

using shard::StatusCode;

TEST_F(ControlLoopHealthTest, UnregisteredRankPastTheRegisterTimeoutRestarts) {
  const std::string id = SubmitJob();
  owners_->loop.Tick();
  Advance(kRegisterTimeoutS);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING);
  Advance(1);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 0 did not register")) << Reason(id);
}

TEST_F(ControlLoopHealthTest, SilentRankPastTheHeartbeatDeadlineRestarts) {
  const std::string id = StartRunningJob();
  Advance(6);
  HeartbeatAll(id, 1);
  Advance(9);  // 15 s since registering, 9 s since the last heartbeat
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RUNNING);
  // Rank 0 keeps heartbeating; rank 1 falls silent.
  ASSERT_TRUE(Heartbeat(id, 1, 0, 2, TokenOf(id, 1)).ok());
  Advance(2);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 1")) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "heartbeat")) << Reason(id);
}

TEST_F(ControlLoopHealthTest, HeartbeatsWithoutProgressPastTheHangLimitRestart) {
  const std::string id = StartRunningJob();
  // Progress resets the clock.
  for (int i = 1; i <= 20; ++i) {
    Advance(5);
    HeartbeatAll(id, i);
    owners_->loop.Tick();
  }
  ASSERT_EQ(State(id), v1::RUNNING);
  // Then step 20 forever: alive, but stuck. The hang limit is 60 s.
  for (int i = 0; i < 12; ++i) {
    Advance(5);
    HeartbeatAll(id, 20);
    owners_->loop.Tick();
    ASSERT_EQ(State(id), v1::RUNNING) << "restarted after only " << (i + 1) * 5 << " s without progress";
  }
  Advance(5);
  HeartbeatAll(id, 20);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "no progress")) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "at step 20")) << Reason(id);
}

// Once step times are known the hang limit shrinks to max(20 x step, 30 s).
TEST_F(ControlLoopHealthTest, KnownStepTimesShortenTheHangLimit) {
  const std::string id = StartRunningJob();
  v1::StepMetric m;
  m.set_step(1);
  m.set_seconds(1.0);
  m.set_tokens(64);
  m.set_loss(5.0);
  ASSERT_TRUE(Heartbeat(id, 1, 0, 1, TokenOf(id, 1), {m}).ok());
  ASSERT_TRUE(Heartbeat(id, 1, 1, 1, TokenOf(id, 1)).ok());
  EXPECT_EQ(Get(id).progress().step(), 1);
  EXPECT_DOUBLE_EQ(Get(id).progress().tokens_per_s(), 64.0);
  EXPECT_DOUBLE_EQ(Get(id).progress().eta_s(), 99.0);
  for (int i = 0; i < 6; ++i) {
    Advance(5);
    HeartbeatAll(id, 1);
    owners_->loop.Tick();
  }
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
  Advance(1);
  HeartbeatAll(id, 1);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "hang limit 30.0 s")) << Reason(id);
}

}  // namespace
}  // namespace shardd::testing
