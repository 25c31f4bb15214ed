// The attempt runner alone, over the fake launcher: which attempts it asks
// about, signalled exits first, and launcher calls made with the job lock free
// (a launcher that takes seconds never holds up a heartbeat).
#include "coordinator/jobs/attempt_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

// Notes, at every call, whether the job lock could be taken.
class LockProbeLauncher : public FakeLauncher {
 public:
  explicit LockProbeLauncher(JobTable** table) : table_(table) {}
  StatusOr<std::vector<int>> Launch(const LaunchRequest& req) override {
    Probe();
    return FakeLauncher::Launch(req);
  }
  std::vector<RankExit> Poll() override {
    Probe();
    return FakeLauncher::Poll();
  }
  void Terminate(const std::string& job_id, int attempt, bool force) override {
    Probe();
    FakeLauncher::Terminate(job_id, attempt, force);
  }
  int Running(const std::string& job_id, int attempt) override {
    Probe();
    return FakeLauncher::Running(job_id, attempt);
  }
  StatusOr<int> Capacity(const LaunchRequest& req) override {
    Probe();
    return FakeLauncher::Capacity(req);
  }
  // Joins the probes (one still waiting gets the lock once its caller lets go).
  void JoinAll() {
    for (std::thread& t : probes_) t.join();
    probes_.clear();
  }
  int calls = 0;
  int under_lock = 0;  // calls made while the job lock was held

 private:
  // Another thread takes the job lock; within 2 s it has, unless our caller holds it.
  void Probe() {
    ++calls;
    auto got = std::make_shared<std::atomic<bool>>(false);
    probes_.emplace_back([t = *table_, got] {
      auto lock = t->Lock();
      got->store(true);
    });
    for (int i = 0; i < 200 && !got->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!got->load()) ++under_lock;
  }
  JobTable** table_;
  std::vector<std::thread> probes_;
};

class AttemptRunnerTest : public JobPartsTest {
 protected:
  void SetUp() override {
    JobPartsTest::SetUp();
    table_ptr_ = table_.get();
    runner_->AddLauncher(&probe_);  // replaces the plain fake ("local")
  }
  void TearDown() override {
    probe_.JoinAll();
    EXPECT_EQ(probe_.under_lock, 0) << "a launcher was called with the job lock held";
    JobPartsTest::TearDown();
  }
  JobTable* table_ptr_ = nullptr;
  LockProbeLauncher probe_{&table_ptr_};
};

TEST_F(AttemptRunnerTest, FindsLaunchersByName) {
  EXPECT_EQ(runner_->Find("local"), &probe_);
  EXPECT_EQ(runner_->Find("slurm"), nullptr);
}

TEST_F(AttemptRunnerTest, ObserveAsksAboutCurrentAndDrainingAttemptsWithTheLockFree) {
  Job& j = AddJob();
  j.launcher = &probe_;
  Begin(j);  // attempt 1, LAUNCHING
  {
    auto lock = table_->Lock();
    j.draining_attempt = 1;
    j.attempt = 2;  // as if attempt 2 had begun while 1 drains
  }
  probe_.SetRunning(j.id, 1, 2);
  probe_.SetRunning(j.id, 2, 1);
  probe_.pending.insert({j.id, 2});
  probe_.Exit(j.id, 2, 0, 1);            // exit code 1
  probe_.Exit(j.id, 2, 1, 0, /*signal=*/9);
  std::lock_guard<std::mutex> serial(runner_->serial());
  const LauncherView view = runner_->Observe(now_ms_);
  EXPECT_EQ(view.running.at({j.id, 1}), 2);
  EXPECT_EQ(view.running.at({j.id, 2}), 1);
  EXPECT_EQ(view.pending.count({j.id, 2}), 1u);
  ASSERT_EQ(view.exits.size(), 2u);
  EXPECT_EQ(view.exits[0].rank, 1);  // the signalled rank first: the likely cause
  EXPECT_GT(probe_.calls, 0);
}

TEST_F(AttemptRunnerTest, ObserveAsksForCapacityOnlyWhereAResizeMayHelp) {
  Job& plain = AddJob("plain");
  plain.launcher = &probe_;
  Job& j = AddJob();
  j.launcher = &probe_;
  {
    auto lock = table_->Lock();
    j.config.resources.launcher = shard::Launcher::kSlurm;
    j.config.restart.min_world_size = 1;
    j.config.restart.elastic_wait_s = 5;
  }
  Begin(plain);
  Begin(j);
  probe_.capacity = 1;
  std::lock_guard<std::mutex> serial(runner_->serial());
  EXPECT_TRUE(runner_->Observe(now_ms_ + 60000).capacity.empty()) << "a first attempt is never resized";
  {
    auto lock = table_->Lock();
    plain.attempt = j.attempt = 2;  // as if both were restarts
  }
  EXPECT_TRUE(runner_->Observe(now_ms_ + 4000).capacity.empty()) << "asked before restart.elastic_wait_s";
  const LauncherView view = runner_->Observe(now_ms_ + 5000);
  ASSERT_EQ(view.capacity.size(), 1u) << "only the elastic job's launcher is asked";
  EXPECT_EQ(*view.capacity.at({j.id, 2}), 1);
  ASSERT_EQ(probe_.capacity_asks.size(), 1u);
  EXPECT_EQ(probe_.capacity_asks[0].world, 2);
  EXPECT_EQ(probe_.capacity_asks[0].attempt, 2);
}

TEST_F(AttemptRunnerTest, QueuedTerminatesRunAfterTheLockIsLetGo) {
  Job& j = AddJob();
  j.launcher = &probe_;
  {
    auto lock = table_->Lock();
    runner_->QueueTerminate(j, 3, /*force=*/true);
  }
  EXPECT_TRUE(probe_.terminates.empty());
  runner_->TryRunTerminates();
  ASSERT_EQ(probe_.terminates.size(), 1u);
  EXPECT_EQ(probe_.CountTerminates(j.id, 3, true), 1);
  runner_->TryRunTerminates();  // the queue is empty now
  EXPECT_EQ(probe_.terminates.size(), 1u);
}

TEST_F(AttemptRunnerTest, AnRpcNeverWaitsForABusyTick) {
  Job& j = AddJob();
  j.launcher = &probe_;
  {
    auto lock = table_->Lock();
    runner_->QueueTerminate(j, 1, false);
  }
  {
    std::lock_guard<std::mutex> tick(runner_->serial());  // a Tick is launching
    runner_->TryRunTerminates();                           // returns at once
    EXPECT_TRUE(probe_.terminates.empty());
    runner_->RunTerminates();  // the Tick runs them when it is done
  }
  EXPECT_EQ(probe_.CountTerminates(j.id, 1, false), 1);
}

TEST_F(AttemptRunnerTest, ExternalJobsHaveNothingToTerminate) {
  Job& j = AddJob();
  j.launcher = nullptr;
  {
    auto lock = table_->Lock();
    runner_->QueueTerminate(j, 1, false);
  }
  runner_->TryRunTerminates();
  EXPECT_TRUE(probe_.terminates.empty());
}

TEST_F(AttemptRunnerTest, LaunchPassesTheRequestAndThePids) {
  LaunchRequest req;
  req.job_id = "tiny-1";
  req.attempt = 1;
  req.world = 3;
  std::lock_guard<std::mutex> serial(runner_->serial());
  auto pids = runner_->Launch(&probe_, req, 1);
  ASSERT_TRUE(pids.ok());
  EXPECT_EQ(pids->size(), 3u);
  ASSERT_EQ(probe_.launches.size(), 1u);
  probe_.launch_error = shard::Unavailable("cluster down");
  EXPECT_EQ(runner_->Launch(&probe_, req, 1).status().code(), shard::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shardd::testing
