// Elastic restarts of jobs whose launcher starts the ranks (resources.
// launcher: slurm; coordinator/jobs/elastic_launched.h), over the
// owners of job_owners_test_util.h with a fake clock and a fake launcher that says how many ranks
// it could place (Launcher::Capacity): a restart whose allocation stays
// PENDING past restart.elastic_wait_s while only 2 of 4 ranks fit continues
// on 2 (one node of 2 tasks instead of two), says why, is not charged as a
// restart; at the next commit after the places return it grows back to 4.
// A first attempt, a restart with room for every rank, and a launcher that
// cannot count shrink nothing; a restarted coordinator adopts a shrunk
// attempt at its size.
//
// Elastic restarts of local GPU jobs (restart.min_world_size; coordinator/
// jobs/elastic_launched.h "size"), over the owners with a fake clock,
// the local scheduler placing the job on GPUs 0-3 and a fake local launcher
// whose Capacity says how many of them are still there. A GPU that fell off
// makes the next restart run on 3 ranks (asked before the launch, with the
// placement's devices), too few left launches at the planned size with one
// refusal event, and the devices' return grows the next restart back. A
// first launch asks nothing.
#include <gtest/gtest.h>

#include "coordinator/launchers/slurm/slurm_script.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class ElasticLaunchedTest : public JobOwnersTest {
 protected:
  void SetUp() override {
    JobOwnersTest::SetUp();
    if (HasFatalFailure()) return;
    owners_->runner.AddLauncher(&slurm_);
    slurm_.pending_reason = "slurm job 42 PENDING (Resources)";
  }
  // 4 ranks on 2 nodes of 2 tasks, global batch 8 of micro 2: 4 and 2 allowed.
  std::string SubmitElastic() {
    auto st = owners_->submission.Submit(Spec(JobYaml(), {"resources.launcher=slurm", "resources.slurm.tasks_per_node=2",
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
    owners_->loop.Tick();
    RegisterRanks(id, 4);
    EXPECT_EQ(State(id), v1::RUNNING);
    slurm_.ExitAll(id, 1, 1, "slurm job 41 NODE_FAIL");
    slurm_.SetRunning(id, 1, 0);
    owners_->loop.Tick();
    EXPECT_EQ(State(id), v1::RESTARTING) << Reason(id);
    Advance(3);  // backoff_s
    owners_->loop.Tick();
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
    owners_->loop.Tick();
    EXPECT_EQ(State(id), v1::RESTARTING) << Reason(id);
    slurm_.SetRunning(id, 2, 0);  // the cancelled PENDING job is gone
    owners_->loop.Tick();
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
  owners_->loop.Tick();
  ASSERT_EQ(State(id), v1::LAUNCHING) << "shrunk before restart.elastic_wait_s: " << Reason(id);
  EXPECT_TRUE(slurm_.capacity_asks.empty()) << "asked the cluster for places before the wait was over";
  Advance(2);
  owners_->loop.Tick();
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
  owners_->loop.Tick();
  EXPECT_EQ(Get(id).attempt(), 2) << "launched before the pending attempt was gone";
  slurm_.SetRunning(id, 2, 0);
  owners_->loop.Tick();
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
  owners_->loop.Tick();
  CommitTwoRanks(id, 5);
  ASSERT_EQ(State(id), v1::RUNNING) << Reason(id);
  // The other job let go of its node.
  slurm_.capacity = 4;
  Advance(1);
  HeartbeatRanks(id, 2);
  owners_->loop.Tick();
  ASSERT_EQ(State(id), v1::RUNNING) << "grew back before a checkpoint: " << Reason(id);
  CommitTwoRanks(id, 10);
  v1::JobStatus s = Get(id);
  ASSERT_EQ(s.state(), v1::RESTARTING) << s.reason();
  EXPECT_EQ(s.reason(),
            "growing back to 4 of 4 ranks after step 10: 4 of 4 ranks placeable (slurm launcher); micro-batches "
            "per step 2 → 1 (global batch 8 kept)");
  EXPECT_EQ(s.restarts(), 1);
  slurm_.SetRunning(id, 3, 0);
  owners_->loop.Tick();
  s = Get(id);
  EXPECT_EQ(s.attempt(), 4);
  EXPECT_EQ(s.attempt_world_size(), 4);
  EXPECT_EQ(LastLaunch().world, 4);
  EXPECT_EQ(LastLaunch().resources.slurm.nodes, 0) << "the full size renders the job's own shape";
}

TEST_F(ElasticLaunchedTest, ACountOlderThanItsFreshnessGrowsNothing) {
  const std::string id = RunShrunk();
  slurm_.capacity = 4;
  owners_->loop.Tick();
  slurm_.capacity = 2;  // asked again below, but not in a Tick: the stale 4 must not count
  Advance(20);
  HeartbeatRanks(id, 2);
  CommitTwoRanks(id, 5);
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
}

TEST_F(ElasticLaunchedTest, RoomForEveryRankOrAFirstAttemptShrinksNothing) {
  // A first attempt that waits in the queue is not short of places.
  const std::string first = SubmitElastic();
  owners_->loop.Tick();
  slurm_.pending.insert({first, 1});
  slurm_.capacity = 2;
  Advance(30);
  owners_->loop.Tick();
  EXPECT_EQ(State(first), v1::LAUNCHING) << Reason(first);
  EXPECT_TRUE(slurm_.capacity_asks.empty());
  ASSERT_TRUE(owners_->submission.Cancel(first, "test").ok());

  // A restart with room for all 4 waits on (the cluster's queue order).
  const std::string id = RestartPending();
  slurm_.capacity = 4;
  Advance(10);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  EXPECT_TRUE(EventsOf(id, "elastic_shrink").empty());
}

TEST_F(ElasticLaunchedTest, TooFewPlacesOrNoCountIsRefusedOnceAndTheRestartWaits) {
  const std::string id = RestartPending();
  slurm_.capacity = 1;
  Advance(6);
  owners_->loop.Tick();
  Advance(1);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  auto refused = EventsOf(id, "elastic_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(Contains(refused[0].message(), "1 of 4 ranks placeable (slurm launcher): 1 of 4 rank(s) available"))
      << refused[0].message();

  ASSERT_TRUE(owners_->submission.Cancel(id, "test").ok());
  const std::string other = RestartPending();
  slurm_.capacity = shard::Unavailable("scontrol show nodes exited with code 1: slurmctld is down");
  Advance(6);
  owners_->loop.Tick();
  EXPECT_EQ(State(other), v1::LAUNCHING) << Reason(other);
  refused = EventsOf(other, "elastic_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(Contains(refused[0].message(), "the slurm launcher cannot say: scontrol show nodes"))
      << refused[0].message();
}

TEST_F(ElasticLaunchedTest, ARestartedCoordinatorAdoptsAShrunkAttemptAtItsSize) {
  const std::string id = RunShrunk();
  owners_.reset();
  FakeLauncher second("slurm");
  owners_ = NewOwners(&launcher_);
  owners_->runner.AddLauncher(&second);
  ASSERT_TRUE(owners_->recovery.Recover().ok());
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RUNNING) << s.reason();
  EXPECT_EQ(s.attempt(), 3);
  EXPECT_EQ(s.attempt_world_size(), 2) << "adopted at the full size: its 2 workers would look lost";
  ASSERT_EQ(second.adopts.size(), 1u);
  EXPECT_EQ(second.adopts[0].pids.size(), 2u);
}

class ElasticLocalTest : public JobOwnersTest {
 protected:
  void SetUp() override {
    JobOwnersTest::SetUp();
    if (HasFatalFailure()) return;
    JobManagerOptions o;
    sched::HostCapacity cap;
    cap.gpus = {0, 1, 2, 3, 4, 5, 6, 7};
    cap.cpu_slots = 2;
    o.local_capacity = cap;
    owners_ = NewOwners(&launcher_, o);
    launcher_.sizes_restarts = true;
  }
  // 4 GPU ranks, global batch 12 of micro 1: 4, 3 and 2 are allowed.
  std::string SubmitElastic() {
    auto st = owners_->submission.Submit(Spec(JobYaml(), {"resources.device=auto", "parallel.world_size=4",
                                                "train.global_batch=12", "train.micro_batch=1",
                                                "restart.min_world_size=2", "restart.max_restarts=5"}));
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->id() : "";
  }
  // The current attempt's rank 0 fails; after the backoff the next launches.
  void FailAndRestart(const std::string& id) {
    const int attempt = Get(id).attempt();
    launcher_.Exit(id, attempt, 0, 1);
    launcher_.SetRunning(id, attempt, 0);
    owners_->loop.Tick();
    ASSERT_EQ(State(id), v1::RESTARTING) << Reason(id);
    for (int i = 0; i < 20 && Get(id).attempt() == attempt; ++i) {  // the backoff (it may grow)
      Advance(3);
      owners_->loop.Tick();
    }
    ASSERT_EQ(Get(id).attempt(), attempt + 1);
  }
};

TEST_F(ElasticLocalTest, RestartRunsOnTheGpusStillThereAndGrowsBackWhenTheyReturn) {
  const std::string id = SubmitElastic();
  owners_->loop.Tick();
  ASSERT_EQ(launcher_.launches.size(), 1u);
  EXPECT_EQ(launcher_.launches.back().world, 4);
  EXPECT_EQ(launcher_.launches.back().env.at("CUDA_VISIBLE_DEVICES"), "0,1,2,3");
  EXPECT_TRUE(launcher_.capacity_asks.empty());  // a first launch is not sized
  RegisterAll(id);

  // GPU 3 fell off the bus: 3 of the job's 4 devices are left.
  launcher_.capacity = 3;
  FailAndRestart(id);
  ASSERT_EQ(launcher_.capacity_asks.size(), 1u);
  EXPECT_EQ(launcher_.capacity_asks[0].world, 4);
  EXPECT_EQ(launcher_.capacity_asks[0].env.at("CUDA_VISIBLE_DEVICES"), "0,1,2,3");
  EXPECT_EQ(launcher_.launches.back().world, 3);
  EXPECT_EQ(launcher_.launches.back().env.at("CUDA_VISIBLE_DEVICES"), "0,1,2,3");  // the launcher picks the 3
  EXPECT_EQ(Get(id).attempt_world_size(), 3);
  auto shrinks = EventsOf(id, "elastic_shrink");
  ASSERT_EQ(shrinks.size(), 1u);
  EXPECT_EQ(shrinks[0].message(),
            "continuing on 3 of 4 ranks at the restart: 3 of 4 ranks placeable (local launcher); micro-batches per "
            "step 3 → 4 (global batch 12 kept)");
  // Running shrunk, the launcher is asked each Tick with the job's devices
  // (what a grow at a commit needs, a restarted coordinator's question too).
  owners_->loop.Tick();
  ASSERT_EQ(launcher_.capacity_asks.size(), 2u);
  EXPECT_EQ(launcher_.capacity_asks[1].attempt, 2);
  EXPECT_EQ(launcher_.capacity_asks[1].env.at("CUDA_VISIBLE_DEVICES"), "0,1,2,3");

  // Only 1 left: below min_world_size, the restart keeps its size and says why once.
  launcher_.capacity = 1;
  FailAndRestart(id);
  EXPECT_EQ(launcher_.launches.back().world, 3);
  auto refused = EventsOf(id, "elastic_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(Contains(refused[0].message(), "cannot size the restart: 1 of 4 ranks placeable (local launcher): 1 of "
                                              "4 rank(s) available, fewer than the smallest world size the job "
                                              "allows (2"))
      << refused[0].message();
  EXPECT_TRUE(Contains(refused[0].message(), "launching on 3 rank(s)")) << refused[0].message();

  // Every device back: the next restart runs on all 4.
  launcher_.capacity = 4;
  FailAndRestart(id);
  EXPECT_EQ(launcher_.launches.back().world, 4);
  EXPECT_EQ(Get(id).attempt_world_size(), 4);
  auto grows = EventsOf(id, "elastic_grow");
  ASSERT_EQ(grows.size(), 1u);
  EXPECT_EQ(grows[0].message(),
            "growing back to 4 of 4 ranks at the restart: 4 of 4 ranks placeable (local launcher); micro-batches per "
            "step 4 → 3 (global batch 12 kept)");
}

TEST_F(ElasticLocalTest, ALauncherThatCannotCountLaunchesAtFullSizeSayingWhy) {
  const std::string id = SubmitElastic();
  owners_->loop.Tick();
  RegisterAll(id);
  launcher_.capacity = shard::Unavailable("GPU probe failed: no CUDA device");
  FailAndRestart(id);
  EXPECT_EQ(launcher_.launches.back().world, 4);
  auto refused = EventsOf(id, "elastic_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].message(),
            "cannot size the restart: the local launcher cannot say: GPU probe failed: no CUDA device; launching on 4 "
            "rank(s)");
}

}  // namespace
}  // namespace shardd::testing
