// Elastic restarts of local GPU jobs (restart.min_world_size; coordinator/
// jobs/elastic_launched.h "size"), through the JobManager with a fake clock,
// the local scheduler placing the job on GPUs 0-3 and a fake local launcher
// whose Capacity says how many of them are still there. A GPU that fell off
// makes the next restart run on 3 ranks (asked before the launch, with the
// placement's devices), too few left launches at the planned size with one
// refusal event, and the devices' return grows the next restart back. A
// first launch asks nothing.
#include <gtest/gtest.h>

#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

class ElasticLocalTest : public JobManagerTest {
 protected:
  void SetUp() override {
    JobManagerTest::SetUp();
    if (HasFatalFailure()) return;
    JobManagerOptions o;
    sched::HostCapacity cap;
    cap.gpus = {0, 1, 2, 3, 4, 5, 6, 7};
    cap.cpu_slots = 2;
    o.local_capacity = cap;
    manager_ = NewManager(&launcher_, o);
    launcher_.sizes_restarts = true;
  }
  // 4 GPU ranks, global batch 12 of micro 1: 4, 3 and 2 are allowed.
  std::string SubmitElastic() {
    auto st = manager_->Submit(Spec(JobYaml(), {"resources.device=auto", "parallel.world_size=4",
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
    manager_->Tick();
    ASSERT_EQ(State(id), v1::RESTARTING) << Reason(id);
    for (int i = 0; i < 20 && Get(id).attempt() == attempt; ++i) {  // the backoff (it may grow)
      Advance(3);
      manager_->Tick();
    }
    ASSERT_EQ(Get(id).attempt(), attempt + 1);
  }
};

TEST_F(ElasticLocalTest, RestartRunsOnTheGpusStillThereAndGrowsBackWhenTheyReturn) {
  const std::string id = SubmitElastic();
  manager_->Tick();
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
  manager_->Tick();
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
  manager_->Tick();
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
