// The worker gateway alone, over a job table with a begun attempt: register
// starts the run once every rank has, heartbeats move a rank's clocks,
// a stale attempt's calls are refused, done ends the job, a symptom-like
// failure waits for its cause, a checkpoint outside the job is refused, and
// every rank's compute per step reaches straggler detection (rank 0's rows
// alone are the job's metrics).
#include "coordinator/jobs/worker_gateway.h"

#include <gtest/gtest.h>

#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

class WorkerGatewayTest : public JobPartsTest {
 protected:
  void SetUp() override {
    JobPartsTest::SetUp();
    gateway_ = std::make_unique<WorkerGateway>(opts_, table_.get(), attempts_.get(), runner_.get(), &rendezvous_);
  }
  // A job with a begun attempt 1; returns its token.
  std::string Started(Job** job) {
    Job& j = AddJob();
    *job = &j;
    return Begin(j).env.at("SHARDD_WORKER_TOKEN");
  }
  Status Register(const std::string& id, int rank, const std::string& token) {
    v1::RegisterRequest req;
    *req.mutable_id() = Worker(id, 1, rank);
    req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
    req.set_hostname("host-" + std::to_string(rank));
    return gateway_->Register(req, token).status();
  }
  std::unique_ptr<WorkerGateway> gateway_;
};

TEST_F(WorkerGatewayTest, TheRunStartsWhenEveryRankHasRegistered) {
  Job* j = nullptr;
  const std::string token = Started(&j);
  ASSERT_TRUE(Register(j->id, 0, token).ok());
  EXPECT_EQ(j->state, v1::LAUNCHING);
  ASSERT_TRUE(Register(j->id, 1, token).ok());
  EXPECT_EQ(j->state, v1::RUNNING);
  EXPECT_EQ(j->reason, "all 2 worker(s) registered");
  EXPECT_EQ(j->ranks[1].hostname, "host-1");
}

TEST_F(WorkerGatewayTest, AnOlderProtocolIsRefused) {
  Job* j = nullptr;
  const std::string token = Started(&j);
  v1::RegisterRequest req;
  *req.mutable_id() = Worker(j->id, 1, 0);
  req.set_protocol_version(0);
  EXPECT_EQ(gateway_->Register(req, token).status().code(), shard::StatusCode::kFailedPrecondition);
  // Protocol 2 sent the checkpoint tier as a string: refused in one line.
  req.set_protocol_version(2);
  const Status two = gateway_->Register(req, token).status();
  EXPECT_EQ(two.code(), shard::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(two.message()),
            "worker protocol version 2 does not match the coordinator's 3; use matching binaries");
}

TEST_F(WorkerGatewayTest, AnUnknownCheckpointTierIsRefusedInOneLine) {
  Job* j = nullptr;
  const std::string token = Started(&j);
  ASSERT_TRUE(Register(j->id, 0, token).ok());
  v1::ReportCheckpointRequest rep;
  *rep.mutable_id() = Worker(j->id, 1, 0);
  rep.set_step(5);
  rep.set_checkpoint_tier(static_cast<v1::CheckpointTierKind>(7));
  const Status st = gateway_->ReportCheckpoint(rep, token).status();
  EXPECT_EQ(st.code(), shard::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(st.message()).rfind("checkpoint report of rank 0: checkpoint tier 7 is neither", 0), 0u)
      << st.ToString();
  v1::HeartbeatRequest hb;
  *hb.mutable_id() = Worker(j->id, 1, 0);
  hb.set_resumed_from("/ckpt/x/step_00000005");
  hb.set_resumed_checkpoint_tier(static_cast<v1::CheckpointTierKind>(9));
  const auto beat = gateway_->Heartbeat(hb, token);
  EXPECT_EQ(beat.status().code(), shard::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(beat.status().message()).find("heartbeat of rank 0: checkpoint tier 9"), std::string::npos)
      << beat.status().ToString();
}

TEST_F(WorkerGatewayTest, HeartbeatsMoveTheRanksClocksAndAWrongTokenIsRefused) {
  Job* j = nullptr;
  const std::string token = Started(&j);
  ASSERT_TRUE(Register(j->id, 0, token).ok());
  now_ms_ += 4000;
  v1::HeartbeatRequest hb;
  *hb.mutable_id() = Worker(j->id, 1, 0);
  hb.set_step(3);
  hb.set_state("training");
  ASSERT_TRUE(gateway_->Heartbeat(hb, token).ok());
  EXPECT_EQ(j->ranks[0].last_heartbeat_ms, now_ms_);
  EXPECT_EQ(j->ranks[0].last_progress_ms, now_ms_);
  EXPECT_EQ(j->ranks[0].step, 3);
  EXPECT_EQ(gateway_->Heartbeat(hb, "not-the-token").status().code(), shard::StatusCode::kUnauthenticated);
  EXPECT_EQ(gateway_->CheckWorker(Worker(j->id, 1, 0), token).code(), shard::StatusCode::kOk);
}

TEST_F(WorkerGatewayTest, EveryRankDoneSucceedsAndDropsTheRendezvousKeys) {
  Job* j = nullptr;
  const std::string token = Started(&j);
  ASSERT_TRUE(rendezvous_.Set({j->id + "/1/", 2}, "gloo/rank_0", "addr").ok());
  for (int r = 0; r < 2; ++r) {
    v1::ReportDoneRequest req;
    *req.mutable_id() = Worker(j->id, 1, r);
    req.set_step(100);
    req.set_final_loss(1.25);
    ASSERT_TRUE(gateway_->ReportDone(req, token).ok());
  }
  EXPECT_EQ(j->state, v1::SUCCEEDED);
  EXPECT_EQ(j->reason, "100 steps, final loss 1.2500");
  EXPECT_EQ(j->draining_attempt, 1);
  EXPECT_FALSE(*rendezvous_.Check({j->id + "/1/", 2}, "gloo/rank_0"));
  EXPECT_EQ(rendezvous_.size(), 0u);
}

TEST_F(WorkerGatewayTest, DonePastTheLastStepIsRefused) {
  Job* j = nullptr;
  const std::string token = Started(&j);
  v1::ReportDoneRequest req;
  *req.mutable_id() = Worker(j->id, 1, 0);
  req.set_step(101);
  EXPECT_EQ(gateway_->ReportDone(req, token).code(), shard::StatusCode::kInvalidArgument);
}

TEST_F(WorkerGatewayTest, ARetryableFailureWaitsASecondForItsCause) {
  Job* j = nullptr;
  const std::string token = Started(&j);
  v1::ReportFailureRequest req;
  *req.mutable_id() = Worker(j->id, 1, 1);
  req.set_error("gloo: connection reset by peer");
  req.set_retryable(true);
  ASSERT_TRUE(gateway_->ReportFailure(req, token).ok());
  EXPECT_EQ(j->state, v1::LAUNCHING);
  EXPECT_EQ(j->health.pending_failure, "rank 1 failed: gloo: connection reset by peer");
  EXPECT_EQ(j->health.pending_deadline_ms, now_ms_ + 1000);
  req.set_retryable(false);
  ASSERT_TRUE(gateway_->ReportFailure(req, token).ok());
  EXPECT_EQ(j->state, v1::FAILED);
  EXPECT_EQ(launcher_.CountTerminates(j->id, 1, false), 1);  // run when the lock was let go
}

TEST_F(WorkerGatewayTest, ACheckpointOutsideTheJobIsRefused) {
  Job* j = nullptr;
  const std::string token = Started(&j);
  v1::ReportCheckpointRequest req;
  *req.mutable_id() = Worker(j->id, 1, 0);
  req.set_step(5);
  req.set_step_dir(Path("elsewhere/step_00000005"));
  auto resp = gateway_->ReportCheckpoint(req, token);
  EXPECT_EQ(resp.status().code(), shard::StatusCode::kInvalidArgument);
  EXPECT_NE(resp.status().message().find("outside the job's"), std::string::npos) << resp.status().ToString();
}

// A checkpoint report proves its rank alive: after a coordinator restart a
// rank's report can arrive before its backed-off heartbeat, and the heartbeat
// deadline must not blame a rank that is reporting (seen in sched_queue.sh
// under load: "rank 0 missed its heartbeat deadline" as it reported step 180).
TEST_F(WorkerGatewayTest, ACheckpointReportIsProofOfLife) {
  Job* j = nullptr;
  const std::string token = Started(&j);
  ASSERT_TRUE(Register(j->id, 0, token).ok());
  now_ms_ += 4000;
  v1::ReportCheckpointRequest req;
  *req.mutable_id() = Worker(j->id, 1, 0);
  req.set_step(5);
  req.set_step_dir(Path("elsewhere/step_00000005"));
  (void)gateway_->ReportCheckpoint(req, token);
  EXPECT_EQ(j->ranks[0].last_heartbeat_ms, now_ms_);
  // ... but only with the rank's token.
  now_ms_ += 4000;
  EXPECT_EQ(gateway_->ReportCheckpoint(req, "not-the-token").status().code(), shard::StatusCode::kUnauthenticated);
  EXPECT_EQ(j->ranks[0].last_heartbeat_ms, now_ms_ - 4000);
}

// Rank `rank`'s heartbeat carrying steps [from, to] at `compute_s` each.
v1::HeartbeatRequest StepsHeartbeat(const v1::WorkerId& id, int64_t from, int64_t to, double compute_s) {
  v1::HeartbeatRequest hb;
  *hb.mutable_id() = id;
  hb.set_step(to);
  hb.set_state("training");
  for (int64_t s = from; s <= to; ++s) {
    v1::StepMetric* m = hb.add_metrics();
    m->set_step(s);
    m->set_seconds(0.5);
    m->set_compute_seconds(compute_s);
  }
  return hb;
}

TEST_F(WorkerGatewayTest, ASlowRankIsNamedOnceAndClearedOnceFromTheHeartbeats) {
  Job& j = AddJob("slow", 3, "health: {straggler_window: 4}\n");
  const std::string token = Begin(j).env.at("SHARDD_WORKER_TOKEN");
  const std::vector<double> compute = {0.1, 0.25, 0.1};  // rank 1 at 40% speed
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(Register(j.id, r, token).ok());
    ASSERT_TRUE(gateway_->Heartbeat(StepsHeartbeat(Worker(j.id, 1, r), 1, 3, compute[r]), token).ok());
  }
  auto named = [&](const std::string& kind) {
    int n = 0;
    for (const EventRecord& e : Events(j.id)) n += e.kind == kind;
    return n;
  };
  EXPECT_EQ(named("straggler"), 0) << "3 of a 4-step window";
  for (int r = 0; r < 3; ++r)
    ASSERT_TRUE(gateway_->Heartbeat(StepsHeartbeat(Worker(j.id, 1, r), 4, 8, compute[r]), token).ok());
  ASSERT_EQ(named("straggler"), 1);
  // Judged on the newest window all three have reported once rank 2's
  // heartbeat arrives: steps 5-8.
  for (const EventRecord& e : Events(j.id))
    if (e.kind == "straggler")
      EXPECT_EQ(e.message,
                "rank 1 is a straggler: 0.25 s of compute per step vs 0.1 s median of the other ranks (steps 5-8)");
  v1::JobStatus st;
  {
    auto lock = table_->Lock();
    st = table_->StatusOf(j);
  }
  ASSERT_EQ(st.workers_size(), 3);
  EXPECT_TRUE(st.workers(1).straggler());
  EXPECT_FALSE(st.workers(0).straggler());
  EXPECT_NEAR(st.workers(1).compute_seconds(), 0.25, 1e-9);
  EXPECT_NEAR(st.workers(2).compute_seconds(), 0.1, 1e-9);
  // The job's metric rows are rank 0's alone.
  auto rows = store_->LoadMetrics(j.id);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(rows->size(), 8u);
  // Back to speed: one more event, the flag goes.
  for (int r = 0; r < 3; ++r)
    ASSERT_TRUE(gateway_->Heartbeat(StepsHeartbeat(Worker(j.id, 1, r), 9, 20, 0.1), token).ok());
  EXPECT_EQ(named("straggler"), 1);
  EXPECT_EQ(named("straggler_cleared"), 1);
  EXPECT_FALSE(j.ranks[1].straggler);
}

TEST_F(WorkerGatewayTest, ANewAttemptForgetsTheLastOnesStragglers) {
  Job& j = AddJob("slow", 2, "health: {straggler_window: 2}\n");
  std::string token = Begin(j).env.at("SHARDD_WORKER_TOKEN");
  for (int r = 0; r < 2; ++r)
    ASSERT_TRUE(gateway_->Heartbeat(StepsHeartbeat(Worker(j.id, 1, r), 1, 2, r == 1 ? 0.5 : 0.1), token).ok());
  ASSERT_TRUE(j.ranks[1].straggler);
  {
    auto lock = table_->Lock();
    attempts_->Fail(j, "rank 0 exited with code 1", true);
    j.state = v1::QUEUED;  // the backoff is over
  }
  now_ms_ += 10'000;
  token = Begin(j).env.at("SHARDD_WORKER_TOKEN");
  ASSERT_EQ(j.attempt, 2);
  EXPECT_FALSE(j.ranks[1].straggler);
  // One step of the new attempt: no window yet, nothing carried over.
  for (int r = 0; r < 2; ++r)
    ASSERT_TRUE(gateway_->Heartbeat(StepsHeartbeat(Worker(j.id, 2, r), 1, 1, 0.1), token).ok());
  EXPECT_FALSE(j.ranks[1].straggler);
  EXPECT_EQ(j.ranks[1].compute_seconds, 0);
}

}  // namespace
}  // namespace shardd::testing
