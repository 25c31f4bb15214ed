// The ControlLoop's stall forgiveness (over the owners of job_owners_test_util.h).
// A stalled coordinator (a suspended VM, a disk that held its lock) is no
// rank's silence: when nothing took the job lock (the liveness pulse, a health
// check, a heartbeat) for longer than stall_forgive_s, the ranks' clocks skip
// that blackout; a rank that is really silent is still caught on the regular
// ticks after it, and health checks held up by a slow launcher call while the
// lock was free forgive nothing.
#include <gtest/gtest.h>

#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class ControlLoopStallTest : public JobOwnersTest {
 protected:
  void SetUp() override {
    JobOwnersTest::SetUp();
    stall_forgive_s_ = 5;  // the production rule; restart.heartbeat_timeout_s is 10
    owners_ = NewOwners(&launcher_);
  }
};

TEST_F(ControlLoopStallTest, ACoordinatorStallIsNotARankSilence) {
  const std::string id = StartRunningJob();
  HeartbeatAll(id, 1);
  Advance(1);
  owners_->loop.Tick();
  Advance(30);  // nothing ran here: no Tick, no heartbeat handled
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
  // The ranks are held to the deadline again from here: rank 0 heartbeats,
  // rank 1 stays silent and is caught on the regular ticks.
  for (int t = 0; t < 12 && State(id) == v1::RUNNING; ++t) {
    Advance(1);
    ASSERT_TRUE(Heartbeat(id, 1, 0, 2, TokenOf(id, 1)).ok());
    owners_->loop.Tick();
  }
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 1 missed its heartbeat deadline")) << Reason(id);
  // Silent 1 s before the stall plus 10 s after it: the gap is not counted.
  EXPECT_TRUE(Contains(Reason(id), "silent for 11.0 s")) << Reason(id);
}

TEST_F(ControlLoopStallTest, AHeartbeatAfterTheStallForgivesItToo) {
  const std::string id = StartRunningJob();
  HeartbeatAll(id, 1);
  Advance(1);
  owners_->loop.Tick();
  Advance(30);
  // The stalled heartbeats reach the lock before the health check does.
  ASSERT_TRUE(Heartbeat(id, 1, 0, 2, TokenOf(id, 1)).ok());
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
}

TEST_F(ControlLoopStallTest, HealthChecksDelayedWhileHeartbeatsWereHandledForgiveNothing) {
  const std::string id = StartRunningJob();
  HeartbeatAll(id, 1);
  owners_->loop.Tick();
  // A launcher call holds the health checks for 30 s; rank 0's heartbeats
  // are handled all along, rank 1 sends none.
  for (int t = 0; t < 30; ++t) {
    Advance(1);
    ASSERT_TRUE(Heartbeat(id, 1, 0, 2 + t, TokenOf(id, 1)).ok());
  }
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 1 missed its heartbeat deadline: silent for 30.0 s")) << Reason(id);
}

// A whole job gone silent (a hung node) while a slow launcher call held up the
// Ticks: no heartbeat came, but the liveness pulse kept taking the lock, so
// the gap is the ranks' silence.
TEST_F(ControlLoopStallTest, EveryRankSilentWhileTheTicksWereHeldUpIsCaught) {
  const std::string id = StartRunningJob();
  HeartbeatAll(id, 1);
  owners_->loop.Tick();
  for (int t = 0; t < 30; ++t) {
    Advance(1);
    owners_->loop.NoteAlive();  // what Start()'s pulse thread does
  }
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "missed its heartbeat deadline: silent for 30.0 s")) << Reason(id);
}

TEST_F(ControlLoopStallTest, RegularTicksStillCatchASilentRank) {
  const std::string id = StartRunningJob();
  HeartbeatAll(id, 1);
  int ticks = 0;
  while (State(id) == v1::RUNNING && ticks < 20) {
    Advance(1);
    owners_->loop.Tick();
    ++ticks;
  }
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_EQ(ticks, 11) << "caught on the first tick past 10 s of silence";
  EXPECT_TRUE(Contains(Reason(id), "heartbeat")) << Reason(id);
}

TEST_F(ControlLoopStallTest, AStallBeforeRegistrationDoesNotUseUpTheRegistrationDeadline) {
  const std::string id = SubmitJob();
  owners_->loop.Tick();
  Advance(1);
  owners_->loop.Tick();
  Advance(kRegisterTimeoutS + 10);  // stalled for longer than the whole deadline
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  RegisterAll(id);
  EXPECT_EQ(State(id), v1::RUNNING);
}

}  // namespace
}  // namespace shardd::testing
