// The scheduler glue alone, on a host of 2 CPU slots: a demand that can never
// fit is refused with the numbers, the queue places one job and says why the
// next waits, a placement is stored and comes back after a restart, and it is
// released only once the job's last processes are gone.
#include "coordinator/jobs/job_scheduler.h"

#include <gtest/gtest.h>

#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

class JobSchedulerTest : public JobPartsTest {
 protected:
  void SetUp() override {
    JobPartsTest::SetUp();
    sched::HostCapacity cap;
    cap.cpu_slots = 2;
    opts_.local_capacity = cap;
    Build();
  }
  // A job with its demand (as Submit computes it) and its resources stored.
  Job& Queued(const std::string& name) {
    Job& j = AddJob(name);
    auto demand = sched_->DemandFor(j.config, 0, "jobs/" + name + ".yaml");
    EXPECT_TRUE(demand.ok()) << demand.status().ToString();
    auto lock = table_->Lock();
    j.placement.demand = *demand;
    sched_->StoreResources(j);
    return j;
  }
};

TEST_F(JobSchedulerTest, ADemandThatCanNeverFitIsRefused) {
  Job& j = AddJob("wide", 4);
  auto demand = sched_->DemandFor(j.config, 0, "jobs/wide.yaml");
  ASSERT_FALSE(demand.ok());
  EXPECT_NE(demand.status().message().find(
                "jobs/wide.yaml: can never run on this host: this job needs 4 CPU slots but the host has 2"),
            std::string::npos)
      << demand.status().ToString();
}

TEST_F(JobSchedulerTest, NoCapacityNoScheduling) {
  opts_.local_capacity.reset();
  Build();
  Job& j = AddJob();
  auto demand = sched_->DemandFor(j.config, 0, "jobs/tiny.yaml");
  ASSERT_TRUE(demand.ok());
  EXPECT_FALSE(demand->has_value());
  EXPECT_TRUE(JobScheduler::MayLaunch(j));
}

TEST_F(JobSchedulerTest, PlacesOneAndTheNextWaitsWithItsReason) {
  Job& a = Queued("a");
  Job& b = Queued("b");
  auto lock = table_->Lock();
  sched_->Schedule(now_ms_);
  EXPECT_TRUE(a.placement.placed);
  EXPECT_TRUE(JobScheduler::MayLaunch(a));
  EXPECT_FALSE(b.placement.placed);
  EXPECT_FALSE(JobScheduler::MayLaunch(b));
  EXPECT_EQ(b.placement.queue_position, 1);
  EXPECT_EQ(b.state, v1::QUEUED);
  EXPECT_FALSE(b.reason.empty());
  LaunchRequest req;
  sched_->AddPlacementEnv(a, &req);
  EXPECT_EQ(req.env.at("SHARDD_CPU_SLOTS"), "0,1");
  lock.unlock();
  EXPECT_EQ(Events(a.id).back().kind, "placed");
}

TEST_F(JobSchedulerTest, APlacementIsReleasedOnlyOnceTheProcessesAreGone) {
  Job& a = Queued("a");
  Job& b = Queued("b");
  auto lock = table_->Lock();
  sched_->Schedule(now_ms_);
  a.state = v1::SUCCEEDED;
  a.draining_attempt = 1;
  sched_->Schedule(now_ms_);
  EXPECT_TRUE(a.placement.placed);
  EXPECT_FALSE(b.placement.placed);
  a.draining_attempt = 0;
  sched_->Schedule(now_ms_);
  EXPECT_FALSE(a.placement.placed);
  EXPECT_TRUE(b.placement.placed);
}

TEST_F(JobSchedulerTest, APlacementComesBackAfterARestart) {
  Job& a = Queued("a");
  {
    auto lock = table_->Lock();
    sched_->Schedule(now_ms_);
    a.state = v1::RUNNING;
  }
  // A new table and scheduler over the same store, with the job loaded again.
  auto copy = std::make_unique<Job>();
  copy->id = a.id;
  copy->name = a.name;
  copy->spec = a.spec;
  copy->config = a.config;
  copy->state = v1::RUNNING;
  Build();
  auto lock = table_->Lock();
  Job& again = table_->Insert(std::move(copy));
  ASSERT_TRUE(sched_->RestorePlacements().ok());
  EXPECT_TRUE(again.placement.placed);
  ASSERT_TRUE(again.placement.demand.has_value());
  EXPECT_EQ(again.placement.demand->cpu_slots, 2);
  EXPECT_EQ(sched_->allocator()->HeldBy(again.id)->cpu_slots, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace shardd::testing
