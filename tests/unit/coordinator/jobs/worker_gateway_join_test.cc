// External jobs (resources.launcher: external), through the WorkerGateway's
// Join over the owners of job_owners_test_util.h: the coordinator launches
// nothing; the user's own launcher (an sbatch script) starts the workers,
// which Join with the job's join token and receive the current attempt's
// number and worker token. The attempt waits without a deadline until the
// first worker joins; from then on the others must register in time. The join
// token survives a coordinator restart.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

class ExternalJobTest : public JobOwnersTest {
 protected:
  // An external job; a hang limit above the registration timeout, so a rank
  // waiting for its peers is judged by the registration deadline alone.
  std::string SubmitExternal() {
    auto st = owners_->submission.Submit(Spec(JobYaml(), {"resources.launcher=external", "restart.hang_timeout_s=600"}));
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->id() : "";
  }
  StatusOr<v1::JoinResponse> Join(const std::string& id, int rank, const std::string& join_token, int world = 2) {
    v1::JoinRequest req;
    req.set_job_id(id);
    req.set_rank(rank);
    req.set_world_size(world);
    req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
    req.set_hostname("node-" + std::to_string(rank));
    return owners_->gateway.Join(req, join_token);
  }
  // Joins and registers one rank; returns the attempt token it was given.
  std::string JoinAndRegister(const std::string& id, int rank) {
    auto j = Join(id, rank, Get(id).join_token());
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    if (!j.ok()) return "";
    auto r = Register(id, j->attempt(), rank, j->token());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return j->token();
  }
};

bool IsLowerHex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

TEST_F(ExternalJobTest, SubmitMakesAJoinTokenAndLaunchesNothing) {
  const std::string id = SubmitExternal();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.launcher(), "external");
  EXPECT_EQ(s.join_token().size(), 48u);
  EXPECT_TRUE(IsLowerHex(s.join_token())) << s.join_token();

  owners_->loop.Tick();
  s = Get(id);
  EXPECT_EQ(s.state(), v1::LAUNCHING);
  EXPECT_EQ(s.attempt(), 1);
  EXPECT_TRUE(launcher_.launches.empty()) << "the coordinator launched an external job's workers";

  // A local job submitted alongside gets no join token.
  EXPECT_EQ(Get(SubmitJob({}, "other")).join_token(), "");
}

TEST_F(ExternalJobTest, JoinChecksTokenRankAndWorldSize) {
  const std::string id = SubmitExternal();
  const std::string join = Get(id).join_token();
  auto early = Join(id, 0, join);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), StatusCode::kUnavailable) << "joined before the attempt existed";
  owners_->loop.Tick();

  for (const std::string& bad : {std::string(), std::string(48, 'a')}) {
    auto st = Join(id, 0, bad);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), StatusCode::kUnauthenticated) << st.status().ToString();
  }
  for (int rank : {-1, 2}) {
    auto st = Join(id, rank, join);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument) << st.status().ToString();
    EXPECT_TRUE(Contains(st.status().message(), "rank " + std::to_string(rank))) << st.status().ToString();
  }
  auto world = Join(id, 0, join, /*world=*/3);
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(world.status().message(), "has 2 ranks")) << world.status().ToString();
  EXPECT_TRUE(Contains(world.status().message(), "started 3")) << world.status().ToString();

  EXPECT_TRUE(Join(id, 1, join, /*world=*/0).ok()) << "an unknown world size (0) is not a mismatch";
}

TEST_F(ExternalJobTest, JoinOfALaunchedJobIsRefused) {
  const std::string id = SubmitJob();
  owners_->loop.Tick();
  auto st = Join(id, 0, TokenOf(id, 1));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st.status().message(), "local")) << st.status().ToString();
}

TEST_F(ExternalJobTest, JoinHandsOutTheAttemptTokenThatRegisterAccepts) {
  const std::string id = SubmitExternal();
  owners_->loop.Tick();
  const std::string join = Get(id).join_token();
  auto j = Join(id, 0, join);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->attempt(), 1);
  EXPECT_EQ(j->token().size(), 48u);
  EXPECT_NE(j->token(), join);
  EXPECT_TRUE(owners_->gateway.CheckWorker(Worker(id, 1, 0), j->token()).ok());
  EXPECT_EQ(owners_->gateway.CheckWorker(Worker(id, 1, 0), join).code(), StatusCode::kUnauthenticated)
      << "the join token works as a worker token";

  ASSERT_TRUE(Register(id, 1, 0, j->token()).ok());
  EXPECT_EQ(State(id), v1::LAUNCHING);
  auto j1 = Join(id, 1, join);
  ASSERT_TRUE(j1.ok()) << j1.status().ToString();
  EXPECT_EQ(j1->token(), j->token());
  ASSERT_TRUE(Register(id, 1, 1, j1->token()).ok());
  EXPECT_EQ(State(id), v1::RUNNING);
  EXPECT_TRUE(launcher_.launches.empty());
}

TEST_F(ExternalJobTest, ARegisteredRankCannotBeJoinedTwice) {
  const std::string id = SubmitExternal();
  owners_->loop.Tick();
  JoinAndRegister(id, 0);
  auto again = Join(id, 0, Get(id).join_token());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(again.status().message(), "host-0")) << again.status().ToString();
  EXPECT_TRUE(Join(id, 1, Get(id).join_token()).ok());
}

// Before any join the attempt waits as long as the user's queue takes; the
// first join starts the registration clock for the others, and an attempt
// that misses it is retried — waiting again without a deadline.
TEST_F(ExternalJobTest, NoDeadlineBeforeTheFirstJoinThenTheOthersMustRegisterInTime) {
  const std::string id = SubmitExternal();
  owners_->loop.Tick();
  for (int i = 0; i < 10; ++i) {
    Advance(kRegisterTimeoutS);
    owners_->loop.Tick();
  }
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  EXPECT_EQ(Get(id).attempt(), 1);

  const std::string token = JoinAndRegister(id, 0);
  for (int t = 5; t < kRegisterTimeoutS; t += 5) {  // rank 0 heartbeats while it waits for rank 1
    Advance(5);
    ASSERT_TRUE(Heartbeat(id, 1, 0, 0, token).ok());
    owners_->loop.Tick();
    ASSERT_EQ(State(id), v1::LAUNCHING) << "at " << t << " s: " << Reason(id);
  }
  Advance(6);
  ASSERT_TRUE(Heartbeat(id, 1, 0, 0, token).ok());
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RESTARTING);
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_TRUE(Contains(s.reason(), "rank 1 did not register")) << s.reason();

  Advance(3);  // restart.backoff_s; no processes of ours to drain
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING);
  EXPECT_EQ(Get(id).attempt(), 2);
  auto j2 = Join(id, 0, Get(id).join_token());
  ASSERT_TRUE(j2.ok()) << j2.status().ToString();
  EXPECT_EQ(j2->attempt(), 2);
  EXPECT_EQ(owners_->gateway.CheckWorker(Worker(id, 1, 0), token).code(), StatusCode::kFailedPrecondition)
      << "the first attempt's token still works";
  for (int i = 0; i < 5; ++i) {
    Advance(kRegisterTimeoutS);
    owners_->loop.Tick();
  }
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  EXPECT_EQ(Get(id).attempt(), 2);
  EXPECT_TRUE(launcher_.launches.empty());
}

TEST_F(ExternalJobTest, RecoveryKeepsTheJoinTokenAndTheWait) {
  const std::string id = SubmitExternal();
  owners_->loop.Tick();
  const std::string join = Get(id).join_token();
  owners_.reset();

  FakeLauncher second;
  owners_ = NewOwners(&second);
  ASSERT_TRUE(owners_->recovery.Recover().ok());
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.join_token(), join);
  EXPECT_EQ(s.state(), v1::LAUNCHING);
  EXPECT_TRUE(second.adopts.empty()) << "an external job's workers were adopted by a launcher";
  Advance(10 * kRegisterTimeoutS);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);

  auto j = Join(id, 0, join);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->attempt(), 1);
  ASSERT_TRUE(Register(id, 1, 0, j->token()).ok());
  auto j1 = Join(id, 1, join);
  ASSERT_TRUE(j1.ok()) << j1.status().ToString();
  ASSERT_TRUE(Register(id, 1, 1, j1->token()).ok());
  EXPECT_EQ(State(id), v1::RUNNING);
  EXPECT_TRUE(second.launches.empty());
}

TEST_F(ExternalJobTest, FinishedJobRefusesJoins) {
  const std::string id = SubmitExternal();
  owners_->loop.Tick();
  ASSERT_TRUE(owners_->submission.Cancel(id, "").ok());
  auto st = Join(id, 0, Get(id).join_token());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace shardd::testing
