// An attempt's state changes alone: what a new attempt's launch request
// carries, restarts until max_restarts and then FAILED, ending an attempt
// (a Terminate queued, never made under the lock; its rendezvous keys
// dropped), preemption without charge, and the launchers' exit reports.
#include "coordinator/jobs/attempt_lifecycle.h"

#include <gtest/gtest.h>

#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

using AttemptLifecycleTest = JobPartsTest;

TEST_F(AttemptLifecycleTest, BeginHandsTheWorkersAFreshTokenAndTheirDirs) {
  opts_.worker_tls_ca = "/etc/ca.pem";
  Job& j = AddJob();
  const LaunchRequest req = Begin(j, "/ckpt/tiny/step_40");
  EXPECT_EQ(j.attempt, 1);
  EXPECT_EQ(j.state, v1::LAUNCHING);
  EXPECT_EQ(req.world, 2);
  EXPECT_EQ(req.log_dir, Path("state") + "/jobs/" + j.id + "/attempt_1");
  EXPECT_EQ(req.coordinator, "127.0.0.1:7000");
  EXPECT_EQ(req.env.at("SHARDD_TLS_CA"), "/etc/ca.pem");
  EXPECT_EQ(HashToken(req.env.at("SHARDD_WORKER_TOKEN")), j.token_hash);
  EXPECT_EQ(j.ckpt.resume_from(), "/ckpt/tiny/step_40");
  const std::vector<EventRecord> events = Events(j.id);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].message, "2 worker(s), resume from /ckpt/tiny/step_40");
}

TEST_F(AttemptLifecycleTest, ARetryableFailureRestartsUntilTheBudgetIsSpent) {
  Job& j = AddJob();  // max_restarts: 2, backoff_s: 3
  for (int attempt = 1; attempt <= 3; ++attempt) {
    Begin(j);
    auto lock = table_->Lock();
    attempts_->Fail(j, "rank 0 died", true);
    if (attempt < 3) {
      EXPECT_EQ(j.state, v1::RESTARTING);
      EXPECT_EQ(j.next_launch_ms, now_ms_ + 3000);
      EXPECT_EQ(j.reason, "rank 0 died; restart " + std::to_string(attempt) +
                              " of 2 in 3.0 s from the newest committed checkpoint");
      j.state = v1::QUEUED;  // the backoff is over
    }
  }
  EXPECT_EQ(j.state, v1::FAILED);
  EXPECT_EQ(j.reason, "max_restarts (2) exhausted; last failure: rank 0 died");
}

TEST_F(AttemptLifecycleTest, ANonRetryableFailureFailsAtOnce) {
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  attempts_->Fail(j, "bad input", false);
  EXPECT_EQ(j.state, v1::FAILED);
  EXPECT_EQ(j.reason, "bad input (not retryable)");
  EXPECT_EQ(j.restarts, 0);
}

TEST_F(AttemptLifecycleTest, EndQueuesATerminateAndDropsTheRendezvousKeys) {
  Job& j = AddJob();
  Begin(j);
  ASSERT_TRUE(rendezvous_.Set({j.id + "/1/", 2}, "gloo/rank_0", "addr").ok());
  ASSERT_TRUE(rendezvous_.Set({"other-1/1/", 2}, "gloo/rank_0", "addr").ok());
  {
    auto lock = table_->Lock();
    attempts_->End(j);
    EXPECT_EQ(j.draining_attempt, 1);
    EXPECT_EQ(j.kill_at_ms, now_ms_ + 5000);
  }
  EXPECT_TRUE(launcher_.terminates.empty());  // queued, not made under the lock
  runner_->TryRunTerminates();
  EXPECT_EQ(launcher_.CountTerminates(j.id, 1, false), 1);
  EXPECT_FALSE(*rendezvous_.Check({j.id + "/1/", 2}, "gloo/rank_0"));
  EXPECT_TRUE(*rendezvous_.Check({"other-1/1/", 2}, "gloo/rank_0"));
}

TEST_F(AttemptLifecycleTest, PreemptionIsNotCharged) {
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  attempts_->Preempt(j, "the cluster took the nodes");
  EXPECT_EQ(j.state, v1::RESTARTING);
  EXPECT_EQ(j.restarts, 0);
  EXPECT_EQ(j.progress.preemptions(), 1);
}

TEST_F(AttemptLifecycleTest, ALaunchThatFailsTransientlyIsRetried) {
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  attempts_->FinishLaunch(j.id, 1, shard::Unavailable("sbatch: cannot reach slurmctld"));
  EXPECT_EQ(j.state, v1::RESTARTING);
  EXPECT_NE(j.reason.find("launch failed: "), std::string::npos) << j.reason;
}

TEST_F(AttemptLifecycleTest, ALaunchRecordsItsPidsEvenAfterACancel) {
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  j.state = v1::CANCELLED;
  attempts_->FinishLaunch(j.id, 1, std::vector<int>{11, 12});
  EXPECT_EQ(j.ranks[1].pid, 12);
  auto workers = store_->LoadWorkers(j.id, 1);
  ASSERT_TRUE(workers.ok());
  EXPECT_EQ(workers->size(), 2u);
}

TEST_F(AttemptLifecycleTest, AnExitNamesTheErrorTheRankReported) {
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  j.ranks[1].error = "CUDA out of memory";
  attempts_->ApplyExit(j, {j.id, 1, 1, 1, 0, ""});
  EXPECT_EQ(j.state, v1::RESTARTING);
  EXPECT_NE(j.reason.find(": CUDA out of memory"), std::string::npos) << j.reason;
  EXPECT_EQ(j.ranks[1].state, "failed");
}

TEST_F(AttemptLifecycleTest, ABadInputExitIsNotRetried) {
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  attempts_->ApplyExit(j, {j.id, 1, 0, 2, 0, ""});
  EXPECT_EQ(j.state, v1::FAILED);
  EXPECT_NE(j.reason.find("(bad input; see " + Path("state") + "/jobs/" + j.id + "/attempt_1/rank_0.log)"),
            std::string::npos)
      << j.reason;
}

TEST_F(AttemptLifecycleTest, AWholeAllocationThatStoppedAfterCheckpointsIsAPreemption) {
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  for (JobRank& r : j.ranks) r.preempted = true;
  attempts_->ApplyExit(j, {j.id, 1, RankExit::kAllRanks, 0, 15, ""});
  EXPECT_EQ(j.state, v1::RESTARTING);
  EXPECT_EQ(Events(j.id).back().kind, "preempted");
}

TEST_F(AttemptLifecycleTest, ADoneRankThatExitsCleanlyChangesNothing) {
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  j.ranks[0].done = true;
  attempts_->ApplyExit(j, {j.id, 1, 0, 0, 0, ""});
  EXPECT_EQ(j.state, v1::LAUNCHING);
  EXPECT_EQ(j.ranks[0].state, "exited");
}

}  // namespace
}  // namespace shardd::testing
