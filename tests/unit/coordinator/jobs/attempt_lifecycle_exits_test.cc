// How an attempt ends and what comes next (AttemptLifecycle, reached through
// the control loop's Tick and the gateway's failure reports, over the owners of
// job_owners_test_util.h): a killed rank restarts after the backoff once the old
// attempt is gone (SIGKILL after the grace for a stubborn one), max_restarts
// fails the job, exit code 2 is bad input, a clean exit before done is a
// retryable failure, a worker's failure report restarts or fails as it says,
// the launcher's exit (a signalled one first) names the cause over a
// survivor's report, and the restart names the error a rank reported or
// logged.
#include <gtest/gtest.h>

#include <csignal>

#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class AttemptExitsTest : public JobOwnersTest {};

using shard::StatusCode;

TEST_F(AttemptExitsTest, KilledRankRestartsAfterBackoffOnceTheOldAttemptIsGone) {
  const std::string id = StartRunningJob();
  const std::string token1 = TokenOf(id, 1);

  launcher_.Exit(id, 1, 1, 0, SIGKILL);
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RESTARTING);
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_TRUE(Contains(s.reason(), "rank 1")) << s.reason();
  EXPECT_TRUE(Contains(s.reason(), "signal 9")) << s.reason();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/false), 1) << "the other ranks were not stopped";

  // The other rank's SIGTERM exit is the drain, not a second failure.
  launcher_.Exit(id, 1, 0, 0, SIGTERM);
  owners_->loop.Tick();
  EXPECT_EQ(Get(id).restarts(), 1);

  // Backoff is 3 s, and attempt 1's processes must be gone first.
  Advance(2.9);
  owners_->loop.Tick();
  EXPECT_EQ(launcher_.launches.size(), 1u) << "relaunched before the backoff";
  Advance(0.2);
  launcher_.SetRunning(id, 1, 1);  // one process of attempt 1 still runs
  owners_->loop.Tick();
  EXPECT_EQ(launcher_.launches.size(), 1u) << "relaunched while attempt 1 still runs";
  launcher_.SetRunning(id, 1, 0);
  owners_->loop.Tick();
  ASSERT_EQ(launcher_.launches.size(), 2u);
  EXPECT_EQ(launcher_.launches[1].attempt, 2);
  EXPECT_EQ(State(id), v1::LAUNCHING);
  EXPECT_EQ(Get(id).attempt(), 2);
  EXPECT_NE(TokenOf(id, 2), token1) << "a new attempt must get a new token";
  // Nothing is committed: attempt 2 resumes as the first one did.
  auto reg = Register(id, 2, 0, TokenOf(id, 2));
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ(reg->kv_prefix(), id + "/2/");
}

// The restart's SIGTERM is followed by SIGKILL after the grace when the old
// attempt's processes do not leave; the next attempt waits for them.
TEST_F(AttemptExitsTest, RestartKillsAStubbornOldAttemptAfterTheGrace) {
  const std::string id = StartRunningJob();
  launcher_.Exit(id, 1, 0, 0, SIGSEGV);
  owners_->loop.Tick();
  ASSERT_EQ(State(id), v1::RESTARTING);
  Advance(kKillGraceS + 1);
  owners_->loop.Tick();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/true), 1);
  EXPECT_EQ(launcher_.launches.size(), 1u);
  launcher_.SetRunning(id, 1, 0);
  owners_->loop.Tick();
  EXPECT_EQ(launcher_.launches.size(), 2u);
}

TEST_F(AttemptExitsTest, MaxRestartsExhaustedFails) {
  const std::string id = StartRunningJob({"restart.max_restarts=1"});
  launcher_.Exit(id, 1, 0, 0, SIGKILL);
  owners_->loop.Tick();
  ASSERT_EQ(State(id), v1::RESTARTING);
  Advance(3);
  launcher_.SetRunning(id, 1, 0);
  owners_->loop.Tick();
  ASSERT_EQ(Get(id).attempt(), 2);

  launcher_.Exit(id, 2, 1, 0, SIGKILL);
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::FAILED);
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_TRUE(Contains(s.reason(), "max_restarts")) << s.reason();
  EXPECT_TRUE(Contains(s.reason(), "rank 1")) << s.reason();
  Advance(100);
  launcher_.SetRunning(id, 2, 0);
  owners_->loop.Tick();
  EXPECT_EQ(launcher_.launches.size(), 2u) << "a failed job was relaunched";
}

TEST_F(AttemptExitsTest, ExitCodeTwoIsBadInputAndFailsAtOnce) {
  const std::string id = StartRunningJob();
  launcher_.Exit(id, 1, 0, 2);
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::FAILED);
  EXPECT_EQ(s.restarts(), 0);
  EXPECT_TRUE(Contains(s.reason(), "not retryable")) << s.reason();
  EXPECT_TRUE(Contains(s.reason(), "rank_0.log")) << s.reason();
}

TEST_F(AttemptExitsTest, CleanExitBeforeReportingDoneIsARetryableFailure) {
  const std::string id = StartRunningJob();
  launcher_.Exit(id, 1, 1, 0);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "before reporting done")) << Reason(id);
}

// A retryable failure a worker reports restarts the attempt, after a moment
// (1 s) in which the launcher may still report the exit that caused it; a
// non-retryable one fails the job at once.
TEST_F(AttemptExitsTest, ReportFailureRestartsOrFailsAsTheWorkerSays) {
  const std::string id = StartRunningJob();
  v1::ReportFailureRequest req;
  *req.mutable_id() = Worker(id, 1, 1);
  req.set_error("NCCL timeout");
  req.set_retryable(true);
  ASSERT_TRUE(owners_->gateway.ReportFailure(req, TokenOf(id, 1)).ok());
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RUNNING) << "restarted before the launcher could name the cause";
  Advance(1);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 1 failed: NCCL timeout")) << Reason(id);

  Advance(3);
  launcher_.SetRunning(id, 1, 0);
  owners_->loop.Tick();
  ASSERT_EQ(Get(id).attempt(), 2);
  *req.mutable_id() = Worker(id, 2, 0);
  req.set_error("model.preset: no such preset");
  req.set_retryable(false);
  ASSERT_TRUE(owners_->gateway.ReportFailure(req, TokenOf(id, 2)).ok());
  EXPECT_EQ(State(id), v1::FAILED);
  EXPECT_TRUE(Contains(Reason(id), "not retryable")) << Reason(id);
  EXPECT_EQ(Get(id).restarts(), 1);
}

// A survivor's report of a peer's death is not the cause: when the launcher
// reports the peer's exit within the moment, that names the restart, and the
// attempt restarts once.
TEST_F(AttemptExitsTest, TheLaunchersExitNamesTheCauseOverASurvivorsReport) {
  const std::string id = StartRunningJob();
  v1::ReportFailureRequest req;
  *req.mutable_id() = Worker(id, 1, 1);
  req.set_error("gloo: connection reset by peer");
  req.set_retryable(true);
  ASSERT_TRUE(owners_->gateway.ReportFailure(req, TokenOf(id, 1)).ok());
  launcher_.Exit(id, 1, 0, 0, SIGKILL);
  Advance(0.5);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 0 killed by signal 9")) << Reason(id);
  Advance(1);
  owners_->loop.Tick();
  EXPECT_EQ(Get(id).restarts(), 1) << "one failure restarted twice";
  EXPECT_EQ(State(id), v1::RESTARTING);
}

// Both exits in one poll (a loaded coordinator saw them late): the one killed
// by a signal names the restart, not the survivor that gave up after it.
TEST_F(AttemptExitsTest, ASignalledExitNamesTheCauseOverAPeerExitSeenWithIt) {
  const std::string id = StartRunningJob();
  launcher_.Exit(id, 1, 0, 1);
  launcher_.Exit(id, 1, 1, 0, SIGKILL);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 1 killed by signal 9")) << Reason(id);
  EXPECT_EQ(Get(id).restarts(), 1);
}

// A rank that reported its error and then exited: the restart names the
// error, not only the exit code. A rank that died before it could report:
// the last error line of its log.
TEST_F(AttemptExitsTest, ARanksExitNamesTheErrorItReportedOrLogged) {
  const std::string id = StartRunningJob({"restart.max_restarts=0"});
  v1::ReportFailureRequest req;
  *req.mutable_id() = Worker(id, 1, 0);
  req.set_error("INTERNAL: cannot write ckpt/tiny/step_00000005: No space left on device");
  req.set_retryable(true);
  ASSERT_TRUE(owners_->gateway.ReportFailure(req, TokenOf(id, 1)).ok());
  launcher_.Exit(id, 1, 0, 1);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::FAILED);
  EXPECT_TRUE(Contains(Reason(id), "rank 0 exited with code 1: INTERNAL: cannot write ckpt/tiny/step_00000005: No "
                                   "space left on device"))
      << Reason(id);

  const std::string other = SubmitJob({"restart.max_restarts=0"}, "other");
  owners_->loop.Tick();
  RegisterAll(other);
  WriteBytes(Path("state") + "/jobs/" + other + "/attempt_1/rank_1.log",
             "2026-12-01 10:00:00.000 I [other/a1/r1] starting\n"
             "shardd-worker: FAILED_PRECONDITION: device: cuda:3, but this host has 2 GPUs\n");
  launcher_.Exit(other, 1, 1, 1);
  owners_->loop.Tick();
  EXPECT_EQ(State(other), v1::FAILED);
  EXPECT_TRUE(Contains(Reason(other), "rank 1 exited with code 1: FAILED_PRECONDITION: device: cuda:3")) << Reason(other);
}

}  // namespace
}  // namespace shardd::testing
