// Elastic restarts of jobs whose launcher starts the ranks (resources.
// launcher: slurm; coordinator/jobs/elastic_launched.h), through the
// JobManager with a fake clock and a fake launcher that says how many ranks
// it could place (Launcher::Capacity): a restart whose allocation stays
// PENDING past restart.elastic_wait_s while only 2 of 4 ranks fit continues
// on 2 (one node of 2 tasks instead of two), says why, is not charged as a
// restart; at the next commit after the places return it grows back to 4.
// A first attempt, a restart with room for every rank, and a launcher that
// cannot count shrink nothing; a restarted coordinator adopts a shrunk
// attempt at its size.
#include <gtest/gtest.h>

#include "coordinator/launchers/slurm/slurm_script.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

class ElasticLaunchedTest : public JobManagerTest {
 protected:
  void SetUp() override {
    JobManagerTest::SetUp();
    if (HasFatalFailure()) return;
    manager_->AddLauncher(&slurm_);
    slurm_.pending_reason = "slurm job 42 PENDING (Resources)";
  }
  // 4 ranks on 2 nodes of 2 tasks, global batch 8 of micro 2: 4 and 2 allowed.
  std::string SubmitElastic() {
    auto st = manager_->Submit(Spec(JobYaml(), {"resources.launcher=slurm", "resources.slurm.tasks_per_node=2",
                                                "parallel.world_size=4", "train.global_batch=8",
                                                "restart.min_world_size=2", "restart.elastic_wait_s=5",
                                                "restart.hang_timeout_s=600"}));
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->id() : "";
  }
  const LaunchRequest& LastLaunch() const { return slurm_.launches.back(); }
  std::string Token() const { return LastLaunch().env.at("SHARDD_WORKER_TOKEN"); }
  void RegisterRanks(const std::string& id, int n) {
    for (int r = 0; r < n; ++r) {
      auto resp = Register(id, Get(id).attempt(), r, Token());
      ASSERT_TRUE(resp.ok()) << resp.status().ToString();
      EXPECT_EQ(resp->world_size(), n);
    }
  }
  void HeartbeatRanks(const std::string& id, int n) {
    for (int r = 0; r < n; ++r) ASSERT_TRUE(Heartbeat(id, Get(id).attempt(), r, 0, Token()).ok());
  }
  // Attempt 1 runs on 4 ranks and its Slurm job fails; attempt 2 is
  // submitted and stays PENDING (Resources).
  std::string RestartPending() {
    const std::string id = SubmitElastic();
    manager_->Tick();
    RegisterRanks(id, 4);
    EXPECT_EQ(State(id), v1::RUNNING);
    slurm_.ExitAll(id, 1, 1, "slurm job 41 NODE_FAIL");
    slurm_.SetRunning(id, 1, 0);
    manager_->Tick();
    EXPECT_EQ(State(id), v1::RESTARTING) << Reason(id);
    Advance(3);  // backoff_s
    manager_->Tick();
    EXPECT_EQ(Get(id).attempt(), 2);
    EXPECT_EQ(LastLaunch().world, 4);
    slurm_.pending.insert({id, 2});
    return id;
  }
  // Both ranks of a 2-rank attempt report `step`: the commit.
  void CommitTwoRanks(const std::string& id, int64_t step) {
    auto resp = ReportTwoRankStep(id, step, Token());
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  }
  // RestartPending, then the shrink to 2 and attempt 3 running on them.
  std::string RunShrunk() {
    const std::string id = RestartPending();
    slurm_.capacity = 2;
    Advance(6);
    manager_->Tick();
    EXPECT_EQ(State(id), v1::RESTARTING) << Reason(id);
    slurm_.SetRunning(id, 2, 0);  // the cancelled PENDING job is gone
    manager_->Tick();
    EXPECT_EQ(Get(id).attempt(), 3);
    RegisterRanks(id, 2);
    EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
    return id;
  }

  FakeLauncher slurm_{"slurm"};
};

TEST_F(ElasticLaunchedTest, ARestartPendingPastTheWaitContinuesOnTheRanksThatFit) {
  const std::string id = RestartPending();
  slurm_.capacity = 2;
  Advance(4);
  manager_->Tick();
  ASSERT_EQ(State(id), v1::LAUNCHING) << "shrunk before restart.elastic_wait_s: " << Reason(id);
  EXPECT_TRUE(slurm_.capacity_asks.empty()) << "asked the cluster for places before the wait was over";
  Advance(2);
  manager_->Tick();
  v1::JobStatus s = Get(id);
  ASSERT_EQ(s.state(), v1::RESTARTING) << s.reason();
  EXPECT_EQ(s.reason(),
            "continuing on 2 of 4 ranks: slurm job 42 PENDING (Resources) for 6 s; 2 of 4 ranks placeable (slurm "
            "launcher); micro-batches per step 1 → 2 (global batch 8 kept)");
  EXPECT_EQ(s.restarts(), 1) << "the shrink was charged as a restart";
  ASSERT_EQ(EventsOf(id, "elastic_shrink").size(), 1u);
  ASSERT_FALSE(slurm_.capacity_asks.empty());
  EXPECT_EQ(slurm_.capacity_asks.back().world, 4);
  EXPECT_EQ(slurm_.capacity_asks.back().attempt, 2);
  EXPECT_EQ(slurm_.CountTerminates(id, 2, false), 1) << "the PENDING Slurm job was not cancelled";
  // The next attempt starts once the cancelled one is gone, on 2 ranks: one node of 2 tasks.
  manager_->Tick();
  EXPECT_EQ(Get(id).attempt(), 2) << "launched before the pending attempt was gone";
  slurm_.SetRunning(id, 2, 0);
  manager_->Tick();
  s = Get(id);
  ASSERT_EQ(s.attempt(), 3) << s.reason();
  EXPECT_EQ(s.attempt_world_size(), 2);
  EXPECT_EQ(LastLaunch().world, 2);
  EXPECT_EQ(LastLaunch().resources.slurm.nodes, 1);
  EXPECT_EQ(LastLaunch().resources.slurm.tasks_per_node, 2);
  const std::string script = RenderSbatchScript(LastLaunch());
  EXPECT_TRUE(Contains(script, "#SBATCH --nodes=1\n")) << script;
  EXPECT_TRUE(Contains(script, "#SBATCH --ntasks-per-node=2\n")) << script;
  RegisterRanks(id, 2);
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
}

TEST_F(ElasticLaunchedTest, GrowsBackAtTheNextCommitWhenThePlacesReturn) {
  const std::string id = RunShrunk();
  // Still 2 places: the commit changes nothing.
  manager_->Tick();
  CommitTwoRanks(id, 5);
  ASSERT_EQ(State(id), v1::RUNNING) << Reason(id);
  // The other job let go of its node.
  slurm_.capacity = 4;
  Advance(1);
  HeartbeatRanks(id, 2);
  manager_->Tick();
  ASSERT_EQ(State(id), v1::RUNNING) << "grew back before a checkpoint: " << Reason(id);
  CommitTwoRanks(id, 10);
  v1::JobStatus s = Get(id);
  ASSERT_EQ(s.state(), v1::RESTARTING) << s.reason();
  EXPECT_EQ(s.reason(),
            "growing back to 4 of 4 ranks after step 10: 4 of 4 ranks placeable (slurm launcher); micro-batches "
            "per step 2 → 1 (global batch 8 kept)");
  EXPECT_EQ(s.restarts(), 1);
  slurm_.SetRunning(id, 3, 0);
  manager_->Tick();
  s = Get(id);
  EXPECT_EQ(s.attempt(), 4);
  EXPECT_EQ(s.attempt_world_size(), 4);
  EXPECT_EQ(LastLaunch().world, 4);
  EXPECT_EQ(LastLaunch().resources.slurm.nodes, 0) << "the full size renders the job's own shape";
}

TEST_F(ElasticLaunchedTest, ACountOlderThanItsFreshnessGrowsNothing) {
  const std::string id = RunShrunk();
  slurm_.capacity = 4;
  manager_->Tick();
  slurm_.capacity = 2;  // asked again below, but not in a Tick: the stale 4 must not count
  Advance(20);
  HeartbeatRanks(id, 2);
  CommitTwoRanks(id, 5);
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
}

TEST_F(ElasticLaunchedTest, RoomForEveryRankOrAFirstAttemptShrinksNothing) {
  // A first attempt that waits in the queue is not short of places.
  const std::string first = SubmitElastic();
  manager_->Tick();
  slurm_.pending.insert({first, 1});
  slurm_.capacity = 2;
  Advance(30);
  manager_->Tick();
  EXPECT_EQ(State(first), v1::LAUNCHING) << Reason(first);
  EXPECT_TRUE(slurm_.capacity_asks.empty());
  ASSERT_TRUE(manager_->Cancel(first, "test").ok());

  // A restart with room for all 4 waits on (the cluster's queue order).
  const std::string id = RestartPending();
  slurm_.capacity = 4;
  Advance(10);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  EXPECT_TRUE(EventsOf(id, "elastic_shrink").empty());
}

TEST_F(ElasticLaunchedTest, TooFewPlacesOrNoCountIsRefusedOnceAndTheRestartWaits) {
  const std::string id = RestartPending();
  slurm_.capacity = 1;
  Advance(6);
  manager_->Tick();
  Advance(1);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  auto refused = EventsOf(id, "elastic_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(Contains(refused[0].message(), "1 of 4 ranks placeable (slurm launcher): 1 of 4 rank(s) available"))
      << refused[0].message();

  ASSERT_TRUE(manager_->Cancel(id, "test").ok());
  const std::string other = RestartPending();
  slurm_.capacity = shard::Unavailable("scontrol show nodes exited with code 1: slurmctld is down");
  Advance(6);
  manager_->Tick();
  EXPECT_EQ(State(other), v1::LAUNCHING) << Reason(other);
  refused = EventsOf(other, "elastic_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(Contains(refused[0].message(), "the slurm launcher cannot say: scontrol show nodes"))
      << refused[0].message();
}

TEST_F(ElasticLaunchedTest, ARestartedCoordinatorAdoptsAShrunkAttemptAtItsSize) {
  const std::string id = RunShrunk();
  manager_.reset();
  FakeLauncher second("slurm");
  manager_ = NewManager(&launcher_);
  manager_->AddLauncher(&second);
  ASSERT_TRUE(manager_->Recover().ok());
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RUNNING) << s.reason();
  EXPECT_EQ(s.attempt(), 3);
  EXPECT_EQ(s.attempt_world_size(), 2) << "adopted at the full size: its 2 workers would look lost";
  ASSERT_EQ(second.adopts.size(), 1u);
  EXPECT_EQ(second.adopts[0].pids.size(), 2u);
}

}  // namespace
}  // namespace shardd::testing
