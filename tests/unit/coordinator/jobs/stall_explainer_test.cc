// The flight recorder through the coordinator's own paths: heartbeats carry
// each rank's collectives (the gateway), and the control loop states the
// cause once, before the attempt's restart, as a stall_cause event and in the
// job's status — for a hang (progress stops, heartbeats go on), a collective
// timeout (a rank's DEADLINE_EXCEEDED report) and a dead rank (its exit).
// Also health.straggler_action: restart, decided on the heartbeat path and
// carried out by the control loop, and its spent budget.
#include "coordinator/jobs/stall_explainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "coordinator/jobs/control_loop.h"
#include "coordinator/jobs/worker_gateway.h"
#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

class StallExplainerTest : public JobPartsTest {
 protected:
  void SetUp() override {
    JobPartsTest::SetUp();
    gateway_ = std::make_unique<WorkerGateway>(opts_, table_.get(), attempts_.get(), runner_.get(), &rendezvous_);
    loop_ = std::make_unique<ControlLoop>(opts_, table_.get(), runner_.get(), attempts_.get(), sched_.get(),
                                          &rendezvous_);
  }
  // A running attempt 1 of `world` ranks (every rank registered); its token.
  std::string Running(Job** job, int world = 3, const std::string& extra = "") {
    Job& j = AddJob("stall", world, extra);
    *job = &j;
    loop_->Tick();  // launches it
    EXPECT_EQ(j.state, v1::LAUNCHING);
    const std::string token = launcher_.launches.back().env.at("SHARDD_WORKER_TOKEN");
    for (int r = 0; r < world; ++r) {
      v1::RegisterRequest req;
      *req.mutable_id() = Worker(j.id, 1, r);
      req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
      EXPECT_TRUE(gateway_->Register(req, token).ok());
    }
    EXPECT_EQ(j.state, v1::RUNNING);
    return token;
  }
  static v1::CollectiveRecord Rec(int64_t seq, const std::string& op, int unit, double started_ago,
                                  double ended_ago = -1, bool failed = false) {
    v1::CollectiveRecord c;
    c.set_group("shard0");
    c.set_group_size(3);
    c.set_seq(seq);
    c.set_op(op);
    c.set_unit(unit);
    c.set_bytes(4096);
    c.set_started_ago_s(started_ago);
    c.set_ended_ago_s(ended_ago);
    c.set_failed(failed);
    return c;
  }
  // Rank `rank` heartbeats at step 5 with these collectives.
  void Beat(Job& j, const std::string& token, int rank, std::vector<v1::CollectiveRecord> recs) {
    v1::HeartbeatRequest hb;
    *hb.mutable_id() = Worker(j.id, 1, rank);
    hb.set_step(5);
    hb.set_state("training");
    for (auto& c : recs) *hb.add_collectives() = c;
    ASSERT_TRUE(gateway_->Heartbeat(hb, token).ok());
  }
  // Ranks 0 and 2 inside all_gather #42 (unit 3) for `waited` s; rank 1
  // finished reduce_scatter #41 (unit 2) `waited` + 1 s ago.
  void RankOneStalled(Job& j, const std::string& token, double waited, bool failed = false) {
    for (int r : {0, 2})
      Beat(j, token, r, {Rec(41, "reduce_scatter", 2, waited + 0.5, waited + 0.2),
                         Rec(42, "all_gather", 3, waited, failed ? 0.1 : -1, failed)});
    Beat(j, token, 1, {Rec(41, "reduce_scatter", 2, waited + 1.5, waited + 1)});
  }
  std::vector<EventRecord> Kind(const std::string& id, const std::string& kind) {
    std::vector<EventRecord> out;
    for (const EventRecord& e : Events(id))
      if (e.kind == kind) out.push_back(e);
    return out;
  }
  v1::JobStatus Status(const Job& j) {
    auto lock = table_->Lock();
    return table_->StatusOf(j);
  }
  std::unique_ptr<WorkerGateway> gateway_;
  std::unique_ptr<ControlLoop> loop_;
};

// A heartbeat's fields are sanitised before they are stored or shown: a
// negative step, NaN/inf rates and ages, a 5,000-character op name, a
// thousand records, a resume note of control characters.
TEST_F(StallExplainerTest, HeartbeatFieldsAreSanitisedBeforeTheyAreStored) {
  Job* j = nullptr;
  const std::string token = Running(&j, 1);
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  v1::HeartbeatRequest hb;
  *hb.mutable_id() = Worker(j->id, 1, 0);
  hb.set_step(-7);
  hb.set_state(std::string(5000, 's'));
  hb.set_tokens_per_s(nan);
  hb.set_rss_bytes(-1);
  hb.set_step_seconds(inf);
  hb.set_resumed_from(std::string("ckpt/step_1\n\x01") + std::string(5000, 'x'));
  hb.set_resumed_step(-3);
  for (int i = 0; i < 1000; ++i) {
    v1::CollectiveRecord c = Rec(-i, std::string(5000, 'o'), -9, i % 2 ? nan : 1e300, i % 2 ? inf : -1e300);
    c.set_group(std::string(5000, 'g'));
    c.set_bytes(-5);
    c.set_group_size(-2);
    *hb.add_collectives() = c;
  }
  ASSERT_TRUE(gateway_->Heartbeat(hb, token).ok());
  const JobRank& r = j->ranks[0];
  EXPECT_EQ(r.step, 0);
  EXPECT_LE(r.state.size(), 64u);
  EXPECT_EQ(r.tokens_per_s, 0);
  EXPECT_EQ(r.rss_bytes, 0);
  EXPECT_EQ(r.step_seconds, 0);
  EXPECT_LE(r.collectives.size(), 64u);
  const int64_t now = opts_.now_ms();
  for (const CollectiveSeen& c : r.collectives) {
    EXPECT_LE(c.op.size(), 64u);
    EXPECT_LE(c.group.size(), 64u);
    EXPECT_GE(c.seq, 0);
    EXPECT_GE(c.bytes, 0);
    EXPECT_GE(c.group_size, 0);
    EXPECT_GE(c.unit, -1);
    EXPECT_LE(c.start_ms, now);
    EXPECT_GE(c.start_ms, now - int64_t{1000} * 86400 * 365);  // no overflow from 1e300 s
    EXPECT_TRUE(c.end_ms == -1 || (c.end_ms <= now && c.end_ms >= c.start_ms)) << c.end_ms;
  }
  const std::vector<EventRecord> resumed = Kind(j->id, "resumed");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_LE(resumed[0].message.size(), 700u);
  EXPECT_EQ(resumed[0].message.find('\x01'), std::string::npos) << resumed[0].message.substr(0, 100);
  EXPECT_EQ(resumed[0].message.find('\n'), std::string::npos) << resumed[0].message.substr(0, 100);
  EXPECT_EQ(resumed[0].message.find("step -3"), std::string::npos) << resumed[0].message.substr(0, 100);
}

TEST_F(StallExplainerTest, AHangNamesTheRankOutsideTheCollectiveBeforeTheRestart) {
  Job* j = nullptr;
  const std::string token = Running(&j);
  // Heartbeats go on every 5 s; the step stays at 5 (first heard at t = 5)
  // past the 60 s hang limit.
  const int64_t t0 = now_ms_;
  for (int t = 5; t <= 70; t += 5) {
    now_ms_ = t0 + t * 1000;
    RankOneStalled(*j, token, t);
    loop_->Tick();
    if (t < 70) {
      ASSERT_EQ(j->state, v1::RUNNING) << "t = " << t << ": " << j->reason;
    }
  }
  ASSERT_EQ(j->state, v1::RESTARTING) << j->reason;
  // The failure reason blames the rank the others wait for, as the stall
  // cause does, not rank 0 (the first rank the watchdog checks).
  EXPECT_EQ(j->reason.rfind("rank 1 is alive but made no progress for ", 0), 0u) << j->reason;
  EXPECT_NE(j->reason.find("the other ranks wait for it in a collective"), std::string::npos) << j->reason;
  const auto stall = Kind(j->id, "stall_cause");
  ASSERT_EQ(stall.size(), 1u);
  EXPECT_EQ(stall[0].message,
            "ranks 0,2 waited 70 s in all_gather #42 (unit 3); rank 1 never entered it: its last collective was "
            "reduce_scatter #41 (unit 2), ended 71 s ago");
  const auto restarting = Kind(j->id, "restarting");
  ASSERT_EQ(restarting.size(), 1u);
  EXPECT_LT(stall[0].seq, restarting[0].seq) << "the cause comes before the restart it explains";
  const v1::JobStatus st = Status(*j);
  EXPECT_EQ(st.stall().text(), stall[0].message);
  EXPECT_EQ(st.stall().attempt(), 1);
  EXPECT_EQ(st.stall().trigger(), "hang");
}

TEST_F(StallExplainerTest, ACollectiveTimeoutIsExplainedWhenItsReportFires) {
  Job* j = nullptr;
  const std::string token = Running(&j);
  RankOneStalled(*j, token, 20, /*failed=*/true);
  v1::ReportFailureRequest req;
  *req.mutable_id() = Worker(j->id, 1, 0);
  req.set_error("DEADLINE_EXCEEDED: all-gather of unit 3: AllGather on gloo:shard0 rank 0/3: timed out after 20000 ms");
  req.set_retryable(true);
  ASSERT_TRUE(gateway_->ReportFailure(req, token).ok());
  now_ms_ += 1000;
  loop_->Tick();
  ASSERT_EQ(j->state, v1::RESTARTING) << j->reason;
  const auto stall = Kind(j->id, "stall_cause");
  ASSERT_EQ(stall.size(), 1u);
  EXPECT_EQ(stall[0].message.rfind("ranks 0,2 waited 20 s in all_gather #42 (unit 3) until it failed; rank 1 never "
                                   "entered it: its last collective was reduce_scatter #41 (unit 2), ended ",
                                   0),
            0u)
      << stall[0].message;
  EXPECT_EQ(Status(*j).stall().trigger(), "collective_timeout");
}

TEST_F(StallExplainerTest, ADeadRankIsNamedWithItsLastCollectiveOnce) {
  Job* j = nullptr;
  const std::string token = Running(&j);
  RankOneStalled(*j, token, 2);
  launcher_.Exit(j->id, 1, 1, -1, 9);
  launcher_.Exit(j->id, 1, 0, 1);  // a survivor's exit after the attempt ended: no second account
  loop_->Tick();
  ASSERT_EQ(j->state, v1::RESTARTING) << j->reason;
  const auto stall = Kind(j->id, "stall_cause");
  ASSERT_EQ(stall.size(), 1u);
  EXPECT_NE(stall[0].message.find("rank 1 never entered it: it was killed by signal 9 (Killed); its last collective was "
                                  "reduce_scatter #41 (unit 2)"),
            std::string::npos)
      << stall[0].message;
  EXPECT_EQ(Status(*j).stall().trigger(), "rank_died");
}

// A rank that failed by itself (a memory save's DATA_LOSS) while its last
// heartbeat had it inside the call its peers wait in: named with its error,
// not "the collective itself is stuck".
TEST_F(StallExplainerTest, ARankThatReportedItsOwnFailureIsNamedWithItsError) {
  Job* j = nullptr;
  const std::string token = Running(&j);
  for (int r : {0, 1, 2}) Beat(*j, token, r, {Rec(42, "all_gather", 3, 4)});
  v1::ReportFailureRequest req;
  *req.mutable_id() = Worker(j->id, 1, 1);
  req.set_error("DATA_LOSS: cannot create checkpoint shard /dev/shm/x/rank_1.tmp: No space left on device");
  req.set_retryable(true);
  ASSERT_TRUE(gateway_->ReportFailure(req, token).ok());
  now_ms_ += 2000;  // its exit never seen (an external launcher): the pending failure's deadline passes
  loop_->Tick();
  ASSERT_EQ(j->state, v1::RESTARTING) << j->reason;
  const auto stall = Kind(j->id, "stall_cause");
  ASSERT_EQ(stall.size(), 1u);
  EXPECT_EQ(stall[0].message.find("itself is stuck"), std::string::npos) << stall[0].message;
  EXPECT_NE(stall[0].message.find("rank 1 died inside it: it failed: DATA_LOSS: cannot create checkpoint shard "
                                  "/dev/shm/x/rank_1.tmp: No space left on device"),
            std::string::npos)
      << stall[0].message;
  EXPECT_EQ(stall[0].message.rfind("ranks 0,2 waited", 0), 0u) << stall[0].message;
}

TEST_F(StallExplainerTest, NoCollectivesReportedMeansNoAccount) {
  Job* j = nullptr;
  Running(&j);
  launcher_.Exit(j->id, 1, 1, -1, 9);
  loop_->Tick();
  ASSERT_EQ(j->state, v1::RESTARTING);
  EXPECT_TRUE(Kind(j->id, "stall_cause").empty());
  EXPECT_FALSE(Status(*j).has_stall());
}

// Rank `rank`'s heartbeat carrying steps [from, to] at `compute_s` each.
v1::HeartbeatRequest Steps(const v1::WorkerId& id, int64_t from, int64_t to, double compute_s) {
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

TEST_F(StallExplainerTest, StragglerActionRestartRestartsTheAttemptOnce) {
  Job* j = nullptr;
  const std::string token = Running(&j, 3, "health: {straggler_window: 4, straggler_action: restart}\n");
  const std::vector<double> compute = {0.1, 0.25, 0.1};
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(gateway_->Heartbeat(Steps(Worker(j->id, 1, r), 1, 4, compute[r]), token).ok());
  EXPECT_EQ(j->state, v1::RUNNING) << "the control loop restarts, not the heartbeat";
  loop_->Tick();
  ASSERT_EQ(j->state, v1::RESTARTING);
  EXPECT_EQ(j->restarts, 1) << "counts like any restart";
  EXPECT_EQ(j->reason.rfind("rank 1 is a straggler: 0.25 s of compute per step vs 0.1 s median of the other ranks "
                            "(steps 1-4); health.straggler_action: restart restarts the attempt; restart 1 of 2",
                            0),
            0u)
      << j->reason;
  EXPECT_EQ(launcher_.CountTerminates(j->id, 1, false), 1);
}

TEST_F(StallExplainerTest, StragglerActionNoneOnlyNames) {
  Job* j = nullptr;
  const std::string token = Running(&j, 3, "health: {straggler_window: 4}\n");
  for (int r = 0; r < 3; ++r)
    ASSERT_TRUE(gateway_->Heartbeat(Steps(Worker(j->id, 1, r), 1, 4, r == 1 ? 0.25 : 0.1), token).ok());
  loop_->Tick();
  EXPECT_EQ(j->state, v1::RUNNING);
  EXPECT_TRUE(j->ranks[1].straggler);
}

TEST_F(StallExplainerTest, AStragglerWithTheRestartBudgetSpentTrainsOn) {
  Job* j = nullptr;
  const std::string token = Running(&j, 3, "health: {straggler_window: 4, straggler_action: restart}\n");
  j->config.restart.max_restarts = 0;
  for (int r = 0; r < 3; ++r)
    ASSERT_TRUE(gateway_->Heartbeat(Steps(Worker(j->id, 1, r), 1, 4, r == 1 ? 0.25 : 0.1), token).ok());
  loop_->Tick();
  EXPECT_EQ(j->state, v1::RUNNING);
  const auto said = Kind(j->id, "straggler_action");
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].message.find("restart.max_restarts (0) is spent, so the job trains on with it"), std::string::npos)
      << said[0].message;
}

TEST(StragglerDecisionTest, OnlyANewStragglerWithBudgetLeftRestarts) {
  StragglerChange slow{1, true, 0.41, 0.17, 1, 20};
  StragglerChange cleared{1, false, 0.18, 0.17, 21, 40};
  EXPECT_FALSE(DecideStragglerAction({slow}, false, 0, 3).restart);
  EXPECT_EQ(DecideStragglerAction({slow}, false, 0, 3).message, "");
  EXPECT_TRUE(DecideStragglerAction({slow}, true, 2, 3).restart);
  EXPECT_FALSE(DecideStragglerAction({cleared}, true, 0, 3).restart);
  EXPECT_EQ(DecideStragglerAction({cleared}, true, 0, 3).message, "");
  EXPECT_FALSE(DecideStragglerAction({slow}, true, 3, 3).restart);
  EXPECT_NE(DecideStragglerAction({slow}, true, 3, 3).message.find("is spent"), std::string::npos);
}

}  // namespace
}  // namespace shardd::testing
