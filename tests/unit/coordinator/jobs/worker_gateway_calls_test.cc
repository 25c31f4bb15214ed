// The WorkerGateway's fencing and what a worker's calls announce, over the
// owners of job_owners_test_util.h: another protocol version is refused; a
// wrong token, another attempt or a bad rank is refused; the checkpoint a
// worker resumed from is one event per attempt, and an attempt that resumed at
// or past train.steps ends SUCCEEDED saying "already complete".
#include <gtest/gtest.h>

#include <csignal>

#include "proto/codec/attempt_ended.h"
#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class WorkerGatewayCallsTest : public JobOwnersTest {};

using shard::StatusCode;

TEST_F(WorkerGatewayCallsTest, RegisterWithAnotherProtocolVersionIsRefused) {
  const std::string id = SubmitJob();
  owners_->loop.Tick();
  v1::RegisterRequest req;
  *req.mutable_id() = Worker(id, 1, 0);
  req.set_protocol_version(99);
  auto st = owners_->gateway.Register(req, TokenOf(id, 1));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st.status().message(), "99")) << st.status().ToString();
}

TEST_F(WorkerGatewayCallsTest, FencingRefusesWrongTokensOtherAttemptsAndBadRanks) {
  const std::string id = StartRunningJob();
  const std::string token1 = TokenOf(id, 1);

  for (const std::string& bad : {std::string(), std::string("x"), std::string(48, '0')}) {
    auto st = Heartbeat(id, 1, 0, 1, bad);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), StatusCode::kUnauthenticated) << "token '" << bad << "'";
    EXPECT_FALSE(NamesAttemptEnded(st.status())) << "a wrong token names no attempt";
  }
  EXPECT_EQ(owners_->gateway.CheckWorker(Worker(id, 1, 2), token1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(owners_->gateway.CheckWorker(Worker("nope-9", 1, 0), token1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(owners_->gateway.CheckWorker(Worker(id, 1, 1), token1).ok());

  // Attempt 1 dies; while restarting its calls are told the attempt is over.
  launcher_.Exit(id, 1, 0, 0, SIGKILL);
  owners_->loop.Tick();
  ASSERT_EQ(State(id), v1::RESTARTING);
  auto over = Heartbeat(id, 1, 1, 1, token1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kAborted);
  // Marked: the one answer that ends a worker (proto/codec/attempt_ended.h).
  EXPECT_TRUE(NamesAttemptEnded(over.status())) << over.status().ToString();

  Advance(3);
  launcher_.SetRunning(id, 1, 0);
  owners_->loop.Tick();
  ASSERT_EQ(Get(id).attempt(), 2);
  const std::string token2 = TokenOf(id, 2);
  // A straggler of attempt 1 holds only attempt 1's token: told its attempt is stale.
  auto stale = Heartbeat(id, 1, 1, 1, token1);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("stale attempt"), std::string::npos) << stale.status().message();
  // Naming attempt 1 with the current token: the stale attempt is named.
  auto named = Heartbeat(id, 1, 1, 1, token2);
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(named.status().message(), "stale attempt 1")) << named.status().ToString();
  EXPECT_TRUE(NamesAttemptEnded(stale.status()) && NamesAttemptEnded(named.status())) << stale.status().ToString();
  v1::ReportDoneRequest done;
  *done.mutable_id() = Worker(id, 1, 0);
  EXPECT_EQ(owners_->gateway.ReportDone(done, token2).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Register(id, 2, 0, token2).ok());
}

std::vector<v1::JobEvent> PastEvents(JobOwners* m, const std::string& id) {
  std::vector<v1::JobEvent> past;
  auto w = m->queries.Watch(id, 0, [](const v1::JobEvent&) {}, &past);
  EXPECT_TRUE(w.ok());
  if (w.ok()) m->queries.Unwatch(*w);
  return past;
}

// Issue 18 item 3: the checkpoint a worker loaded is an event (run and watch
// print it), once per attempt; an attempt that resumed at or past
// train.steps ends SUCCEEDED saying "already complete", not "final loss".
TEST_F(WorkerGatewayCallsTest, TheResumedStepIsAnEventAndAlreadyCompleteIsSaidAsSuch) {
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  for (int i = 0; i < 3; ++i) {
    v1::HeartbeatRequest req;
    *req.mutable_id() = Worker(id, 1, 0);
    req.set_step(100);
    req.set_resumed_from("/runs/tiny/step_00000100");
    req.set_resumed_step(100);
    ASSERT_TRUE(owners_->gateway.Heartbeat(req, token).ok());
  }
  int resumed = 0;
  for (const auto& e : PastEvents(owners_.get(), id)) {
    if (e.kind() != "resumed") continue;
    ++resumed;
    // An older worker sends no tier: a disk step.
    EXPECT_NE(e.message().find("resumed from step 100 (disk): /runs/tiny/step_00000100 at step 100 >= train.steps 100"),
              std::string::npos)
        << e.message();
  }
  EXPECT_EQ(resumed, 1) << "one event per attempt, not one per heartbeat";
  for (int r = 0; r < 2; ++r) {
    v1::ReportDoneRequest req;
    *req.mutable_id() = Worker(id, 1, r);
    req.set_step(100);
    req.set_final_loss(0.0);
    req.set_nothing_trained(true);
    req.set_total_steps(100);
    ASSERT_TRUE(owners_->gateway.ReportDone(req, token).ok());
  }
  EXPECT_EQ(State(id), v1::SUCCEEDED);
  EXPECT_NE(Reason(id).find("already complete"), std::string::npos) << Reason(id);
  EXPECT_EQ(Reason(id).find("final loss"), std::string::npos) << Reason(id);
}

}  // namespace
}  // namespace shardd::testing
