// The JobScheduler's local capacity (coordinator/sched), over the owners of
// job_owners_test_util.h: jobs queue for
// CPU slots and GPUs, launch with their placement's environment, keep it
// through restarts and coordinator restarts, and release it only once their
// processes are gone. Fake launcher, fake clock.


#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class ScheduleTest : public JobOwnersTest {
 protected:
  void SetUp() override {
    JobOwnersTest::SetUp();
    if (HasFatalFailure()) return;
    owners_ = NewScheduled();
  }
  std::unique_ptr<JobOwners> NewScheduled() {
    JobManagerOptions o;
    sched::HostCapacity cap;
    cap.gpus = {0, 1, 2, 3, 4, 5, 6, 7};
    cap.cpu_slots = 2;
    cap.host_bytes = 0;
    o.local_capacity = cap;
    o.starvation_ms = 60'000;
    return NewOwners(&launcher_, o);
  }
  std::string Submit(const std::string& name, const std::string& extra = "", std::vector<std::string> sets = {}) {
    auto st = owners_->submission.Submit(Spec(JobYaml(name, extra), std::move(sets)));
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->id() : "";
  }
  int Launches(const std::string& id) const {
    int n = 0;
    for (const LaunchRequest& r : launcher_.launches) n += r.job_id == id;
    return n;
  }
  const LaunchRequest& LastLaunch(const std::string& id) const {
    for (auto it = launcher_.launches.rbegin(); it != launcher_.launches.rend(); ++it)
      if (it->job_id == id) return *it;
    static LaunchRequest none;
    ADD_FAILURE() << "no launch of " << id;
    return none;
  }
};

TEST_F(ScheduleTest, NeverFitsIsRefusedWithTheNumbers) {
  auto st = owners_->submission.Submit(Spec(JobYaml("wide"), {"parallel.world_size=4", "train.global_batch=8"}));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.status().message(),
                       "jobs/tiny.yaml: can never run on this host: this job needs 4 CPU slots but the host has 2"))
      << st.status().ToString();
}

TEST_F(ScheduleTest, OneAtATimeByPriorityAndReleasedOnlyWhenProcessesAreGone) {
  const std::string a = Submit("a");
  owners_->loop.Tick();
  ASSERT_EQ(Launches(a), 1);
  EXPECT_EQ(LastLaunch(a).env.at("SHARDD_CPU_SLOTS"), "0,1");
  EXPECT_EQ(LastLaunch(a).env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(LastLaunch(a).env.at("CUDA_VISIBLE_DEVICES"), "");
  EXPECT_TRUE(Contains(Get(a).placement(), "CPU slots 0-1")) << Get(a).placement();
  const std::string b = Submit("b", "priority: 1\n");
  const std::string c = Submit("c", "priority: 5\n");
  owners_->loop.Tick();
  EXPECT_EQ(State(b), v1::QUEUED);
  EXPECT_EQ(Reason(c), "waiting for 2 CPU slots: 0-1 held by job " + a);
  EXPECT_EQ(Get(c).queue_position(), 1);
  EXPECT_EQ(Get(b).queue_position(), 2);
  // a is cancelled, but its workers still run: nothing starts.
  ASSERT_TRUE(owners_->submission.Cancel(a, "").ok());
  owners_->loop.Tick();
  EXPECT_EQ(Launches(c), 0);
  launcher_.SetRunning(a, 1, 0);
  owners_->loop.Tick();  // a's attempt drained
  owners_->loop.Tick();  // its slots released, c placed and launched
  EXPECT_EQ(Launches(c), 1);
  EXPECT_EQ(Launches(b), 0);
  EXPECT_EQ(Get(a).placement(), "");
  // Cancelling a queued job takes it out of the queue.
  ASSERT_TRUE(owners_->submission.Cancel(b, "not needed").ok());
  EXPECT_EQ(State(b), v1::CANCELLED);
  owners_->loop.Tick();
  EXPECT_EQ(Launches(b), 0);
}

TEST_F(ScheduleTest, ARestartingJobKeepsItsSlotsThroughItsBackoff) {
  const std::string a = Submit("a");
  owners_->loop.Tick();
  const std::string b = Submit("b", "priority: 9\n");
  launcher_.Exit(a, 1, 0, 1);
  launcher_.SetRunning(a, 1, 0);
  owners_->loop.Tick();
  ASSERT_EQ(State(a), v1::RESTARTING);
  for (int i = 0; i < 5; ++i) {
    owners_->loop.Tick();
    EXPECT_EQ(Launches(b), 0) << "b took a's slots during a's backoff";
  }
  Advance(4);  // past backoff_s: 3
  owners_->loop.Tick();
  EXPECT_EQ(Launches(a), 2);
  EXPECT_EQ(LastLaunch(a).env.at("SHARDD_CPU_SLOTS"), "0,1");
  EXPECT_EQ(State(b), v1::QUEUED);
}

TEST_F(ScheduleTest, GpuJobsGetDisjointDevices) {
  // auto on a host with GPUs: one per rank, as the worker decides.
  const std::string a = Submit("g1", "", {"resources.device=auto", "parallel.world_size=4", "train.global_batch=8"});
  const std::string b = Submit("g2", "", {"resources.device=auto", "parallel.world_size=4", "train.global_batch=8"});
  const std::string c = Submit("g3", "", {"resources.device=auto", "parallel.world_size=8", "train.global_batch=16"});
  owners_->loop.Tick();
  EXPECT_EQ(LastLaunch(a).env.at("CUDA_VISIBLE_DEVICES"), "0,1,2,3");
  EXPECT_EQ(LastLaunch(b).env.at("CUDA_VISIBLE_DEVICES"), "4,5,6,7");
  EXPECT_EQ(Launches(c), 0);
  EXPECT_EQ(Reason(c), "waiting for 8 GPUs: 0-3 held by job " + a + ", 4-7 held by job " + b);
}

TEST_F(ScheduleTest, ACoordinatorRestartKeepsPlacementsAndTheQueue) {
  const std::string a = Submit("a");
  owners_->loop.Tick();
  RegisterAll(a);
  const std::string b = Submit("b");
  const std::string c = Submit("c", "priority: 3\n");
  owners_->loop.Tick();
  const std::string placed = Get(a).placement();
  ASSERT_TRUE(Contains(placed, "CPU slots 0-1")) << placed;
  owners_.reset();
  owners_ = NewScheduled();
  ASSERT_TRUE(owners_->recovery.Recover().ok());
  EXPECT_EQ(Get(a).placement(), placed);  // adopted, with its slots
  launcher_.SetRunning(a, 1, 2);
  owners_->loop.Tick();
  EXPECT_EQ(State(b), v1::QUEUED);
  EXPECT_EQ(State(c), v1::QUEUED);
  EXPECT_EQ(Get(c).queue_position(), 1);
  EXPECT_EQ(Get(b).queue_position(), 2);
  EXPECT_EQ(Launches(b) + Launches(c), 0);
}

}  // namespace
}  // namespace shardd::testing
