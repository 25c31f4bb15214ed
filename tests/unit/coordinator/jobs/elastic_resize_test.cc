// Elastic restarts of external jobs (restart.min_world_size,
// coordinator/jobs/elastic_resize.h), over the owners of
// job_owners_test_util.h with a fake clock: host b is lost, the next attempt waits restart.elastic_wait_s for
// its ranks, then continues on host a's two of four (planner-checked, not
// charged as a restart) and says what changed; the workers register into a
// world of 2; a shrunk attempt hands a worker that asks for a rank beyond it
// a free one, or keeps it standing by; standby workers grow the job back at
// its next committed checkpoint; too few ranks, or elastic off, shrinks
// nothing.
#include <gtest/gtest.h>

#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

class ElasticJobTest : public JobOwnersTest {
 protected:
  // full_shard over 4 external ranks, global batch 8 of micro 2: 4 and 2
  // ranks allowed (3 would leave a remainder).
  std::string SubmitElastic(std::vector<std::string> sets = {"restart.min_world_size=2"}) {
    sets.insert(sets.end(), {"resources.launcher=external", "parallel.world_size=4", "train.global_batch=8",
                             "restart.elastic_wait_s=5", "restart.hang_timeout_s=600"});
    auto st = owners_->submission.Submit(Spec(JobYaml(), sets));
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->id() : "";
  }
  StatusOr<v1::JoinResponse> Join(const std::string& id, int rank, const std::string& host) {
    v1::JoinRequest req;
    req.set_job_id(id);
    req.set_rank(rank);
    req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
    req.set_hostname(host);
    return owners_->gateway.Join(req, Get(id).join_token());
  }
  // Joins as `rank` from `host` and registers as the rank the join handed out.
  StatusOr<v1::RegisterResponse> JoinAndRegister(const std::string& id, int rank, const std::string& host) {
    auto j = Join(id, rank, host);
    if (!j.ok()) return j.status();
    token_ = j->token();
    v1::RegisterRequest req;
    *req.mutable_id() = Worker(id, j->attempt(), j->rank());
    req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
    req.set_hostname(host);
    return owners_->gateway.Register(req, token_);
  }
  void HeartbeatRanks(const std::string& id, std::initializer_list<int> ranks) {
    for (int r : ranks) ASSERT_TRUE(Heartbeat(id, Get(id).attempt(), r, 0, token_).ok());
  }
  // Attempt 1 on hosts a (ranks 0, 1) and b (2, 3); b goes silent; of
  // attempt 2's ranks only `rejoin` join and register.
  std::string LoseHostB(std::vector<std::string> sets = {"restart.min_world_size=2"},
                        std::initializer_list<int> rejoin = {0, 1}) {
    const std::string id = SubmitElastic(std::move(sets));
    owners_->loop.Tick();
    for (int r = 0; r < 4; ++r) EXPECT_TRUE(JoinAndRegister(id, r, r < 2 ? "a" : "b").ok());
    EXPECT_EQ(State(id), v1::RUNNING);
    Advance(11);  // heartbeat_timeout_s 10: b is silent
    HeartbeatRanks(id, {0, 1});
    owners_->loop.Tick();
    EXPECT_EQ(State(id), v1::RESTARTING) << Reason(id);
    Advance(3);  // backoff_s
    owners_->loop.Tick();
    EXPECT_EQ(Get(id).attempt(), 2);
    EXPECT_EQ(Get(id).attempt_world_size(), 4);
    for (int r : rejoin) EXPECT_TRUE(JoinAndRegister(id, r, "a").ok());
    return id;
  }
  // Host b lost (LoseHostB) and restart.elastic_wait_s past: the job shrinks
  // to host a's ranks 0 and 1 and begins its attempt 3 on them.
  std::string ShrinkToHostA() {
    const std::string id = LoseHostB();
    Advance(6);
    HeartbeatRanks(id, {0, 1});
    owners_->loop.Tick();  // shrink
    owners_->loop.Tick();  // attempt 3 on 2 ranks
    return id;
  }
  // Both ranks of a 2-rank attempt report `step`: the commit.
  StatusOr<v1::ReportCheckpointResponse> CommitTwoRanks(const std::string& id, int64_t step) {
    return ReportTwoRankStep(id, step, token_);
  }
  std::string token_;
};

TEST_F(ElasticJobTest, AHostLostForGoodContinuesOnTheOthersRanks) {
  const std::string id = LoseHostB();
  Advance(4);
  HeartbeatRanks(id, {0, 1});
  owners_->loop.Tick();
  ASSERT_EQ(State(id), v1::LAUNCHING) << "shrunk before restart.elastic_wait_s: " << Reason(id);
  Advance(2);
  HeartbeatRanks(id, {0, 1});
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  ASSERT_EQ(s.state(), v1::RESTARTING) << s.reason();
  EXPECT_EQ(s.reason(),
            "continuing on 2 of 4 ranks: host b lost (ranks 2, 3 did not join within 6 s); micro-batches per step "
            "1 → 2 (global batch 8 kept)");
  EXPECT_EQ(s.restarts(), 1) << "the shrink was charged as a restart";
  ASSERT_EQ(EventsOf(id, "elastic_shrink").size(), 1u);
  // The shrunk attempt starts at once (no backoff): 2 ranks, which register into a world of 2.
  owners_->loop.Tick();
  s = Get(id);
  EXPECT_EQ(s.state(), v1::LAUNCHING) << s.reason();
  EXPECT_EQ(s.attempt(), 3);
  EXPECT_EQ(s.world_size(), 4);
  EXPECT_EQ(s.attempt_world_size(), 2);
  EXPECT_EQ(owners_->gateway.CheckWorker(Worker(id, 2, 0), token_).code(), StatusCode::kFailedPrecondition)
      << "the ended attempt's workers are not fenced";
  for (int r = 0; r < 2; ++r) {
    auto reg = JoinAndRegister(id, r, "a");
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    EXPECT_EQ(reg->world_size(), 2);
  }
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
  // Health is judged on the 2 ranks alone.
  Advance(8);
  HeartbeatRanks(id, {0, 1});
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
}

TEST_F(ElasticJobTest, StandbyWorkersGrowTheJobBackAtTheNextCommit) {
  const std::string id = ShrinkToHostA();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(JoinAndRegister(id, r, "a").ok());
  ASSERT_EQ(State(id), v1::RUNNING);
  // Host b is back: its workers ask for ranks 2 and 3 and stand by.
  for (int r = 2; r < 4; ++r) {
    auto j = Join(id, r, "b");
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().code(), StatusCode::kUnavailable);
    EXPECT_TRUE(Contains(j.status().message(), "stands by")) << j.status().ToString();
  }
  EXPECT_EQ(State(id), v1::RUNNING) << "grew back before a checkpoint";
  auto committed = CommitTwoRanks(id, 5);
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_TRUE(committed->committed());
  v1::JobStatus s = Get(id);
  ASSERT_EQ(s.state(), v1::RESTARTING) << s.reason();
  EXPECT_EQ(s.reason(),
            "growing back to 4 of 4 ranks after step 5: 2 worker(s) stand by; micro-batches per step 2 → 1 "
            "(global batch 8 kept)");
  EXPECT_EQ(s.restarts(), 1);
  owners_->loop.Tick();
  s = Get(id);
  EXPECT_EQ(s.attempt(), 4);
  EXPECT_EQ(s.attempt_world_size(), 4);
  EXPECT_EQ(s.state(), v1::LAUNCHING) << s.reason();
}

TEST_F(ElasticJobTest, AGrownAttemptWaitsForTheRanksWhoseWorkersJoined) {
  // Grown back to 4 (as above): host b's standby workers join and register
  // at once; host a's, restarted when the shrunk attempt ended, join but
  // are still starting up past restart.elastic_wait_s. They are coming, not
  // lost: the attempt must not shrink to b's ranks.
  const std::string id = ShrinkToHostA();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(JoinAndRegister(id, r, "a").ok());
  for (int r = 2; r < 4; ++r) ASSERT_FALSE(Join(id, r, "b").ok());
  ASSERT_TRUE(CommitTwoRanks(id, 5).ok());
  owners_->loop.Tick();
  ASSERT_EQ(Get(id).attempt(), 4);
  ASSERT_EQ(Get(id).attempt_world_size(), 4);
  for (int r = 2; r < 4; ++r) ASSERT_TRUE(JoinAndRegister(id, r, "b").ok());
  std::vector<v1::JoinResponse> joined;
  for (int r = 0; r < 2; ++r) {
    auto j = Join(id, r, "a");
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    joined.push_back(*j);
  }
  Advance(6);
  HeartbeatRanks(id, {2, 3});
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  ASSERT_EQ(s.state(), v1::LAUNCHING) << s.reason();
  EXPECT_EQ(s.attempt(), 4);
  EXPECT_EQ(EventsOf(id, "elastic_shrink").size(), 1u) << "only host b's loss shrank the job";
  for (const v1::JoinResponse& j : joined) {
    v1::RegisterRequest req;
    *req.mutable_id() = Worker(id, j.attempt(), j.rank());
    req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
    req.set_hostname("a");
    ASSERT_TRUE(owners_->gateway.Register(req, j.token()).ok());
  }
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
}

TEST_F(ElasticJobTest, StandbyWorkersThatStoppedAskingAreNotCounted) {
  const std::string id = ShrinkToHostA();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(JoinAndRegister(id, r, "a").ok());
  ASSERT_FALSE(Join(id, 2, "b").ok());
  ASSERT_FALSE(Join(id, 3, "b").ok());
  Advance(20);  // longer than the standby's freshness
  HeartbeatRanks(id, {0, 1});
  ASSERT_TRUE(CommitTwoRanks(id, 5).ok());
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
}

TEST_F(ElasticJobTest, AShrunkAttemptHandsOutFreeRanksOnceItsOwnWorkersHadTheirTime) {
  const std::string id = ShrinkToHostA();
  ASSERT_EQ(Get(id).attempt_world_size(), 2);
  // Host b's workers come first: within elastic_wait_s ranks 0 and 1 wait
  // for the workers that ask for them by number, so b's stand by.
  for (int r : {3, 2}) {
    auto early = Join(id, r, "b");
    ASSERT_FALSE(early.ok());
    EXPECT_EQ(early.status().code(), StatusCode::kUnavailable) << early.status().ToString();
  }
  // Host a never comes back: b's workers take ranks 0 and 1.
  Advance(6);
  auto b3 = JoinAndRegister(id, 3, "b");
  ASSERT_TRUE(b3.ok()) << b3.status().ToString();
  EXPECT_EQ(b3->world_size(), 2);
  auto b2 = Join(id, 2, "b");
  ASSERT_TRUE(b2.ok()) << b2.status().ToString();
  EXPECT_EQ(b2->rank(), 1) << "rank 0 was handed out already";
  v1::RegisterRequest req;
  *req.mutable_id() = Worker(id, b2->attempt(), b2->rank());
  req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
  req.set_hostname("b");
  ASSERT_TRUE(owners_->gateway.Register(req, b2->token()).ok());
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
  // A late worker of host a now stands by ...
  auto a0 = Join(id, 0, "a");
  ASSERT_FALSE(a0.ok());
  EXPECT_EQ(a0.status().code(), StatusCode::kUnavailable) << a0.status().ToString();
  // ... and b's workers, which stood by before they got their ranks, are not
  // counted again: one standby worker (3 ranks) allows no larger world.
  ASSERT_TRUE(CommitTwoRanks(id, 5).ok());
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
}

TEST_F(ElasticJobTest, TheFirstAttemptWaitsForAllItsRanks) {
  const std::string id = SubmitElastic();
  owners_->loop.Tick();
  ASSERT_TRUE(JoinAndRegister(id, 0, "a").ok());
  ASSERT_TRUE(JoinAndRegister(id, 1, "a").ok());
  for (int i = 0; i < 3; ++i) {
    Advance(6);
    HeartbeatRanks(id, {0, 1});
    owners_->loop.Tick();
  }
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  EXPECT_EQ(Get(id).attempt(), 1);
  EXPECT_TRUE(EventsOf(id, "elastic_shrink").empty());
}

TEST_F(ElasticJobTest, TooFewRanksShrinkNothingAndSaySoOnce) {
  const std::string id = LoseHostB({"restart.min_world_size=2"}, {0});
  for (int i = 0; i < 3; ++i) {
    Advance(6);
    HeartbeatRanks(id, {0});
    owners_->loop.Tick();
  }
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  EXPECT_EQ(Get(id).attempt(), 2);
  const auto refused = EventsOf(id, "elastic_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].message(),
            "cannot continue on fewer ranks: 1 of 4 rank(s) available, fewer than the smallest world size the job "
            "allows (2: restart.min_world_size 2, its sharding and train.global_batch); waiting for all 4");
}

TEST_F(ElasticJobTest, OffByDefault) {
  const std::string id = LoseHostB({});
  for (int i = 0; i < 5; ++i) {
    Advance(6);
    HeartbeatRanks(id, {0, 1});
    owners_->loop.Tick();
  }
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  EXPECT_EQ(Get(id).attempt(), 2);
  EXPECT_TRUE(EventsOf(id, "elastic_shrink").empty());
}

}  // namespace
}  // namespace shardd::testing
