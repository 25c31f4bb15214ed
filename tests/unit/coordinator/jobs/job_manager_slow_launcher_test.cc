// Nothing slow runs under the JobManager's lock: while a launcher blocks in
// Launch or Poll (sbatch, kubectl or scontrol taking seconds), heartbeats,
// status queries and submissions from other threads are answered at once,
// and a cancel that arrives during a blocked launch wins: the job ends
// CANCELLED and the launched attempt is terminated, not left running.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using namespace std::chrono_literals;

// Generous on purpose: the blocked call lasts 10 s, and a loaded 2-core
// machine must not make an answered call look blocked.
constexpr auto kPrompt = 2s;
constexpr auto kBlockFor = 10s;

// A FakeLauncher whose Launch or Poll blocks for kBlockFor, or until Release.
class BlockingLauncher : public FakeLauncher {
 public:
  StatusOr<std::vector<int>> Launch(const LaunchRequest& req) override {
    if (block_launch) Block(&in_launch);
    return FakeLauncher::Launch(req);
  }
  std::vector<RankExit> Poll() override {
    if (block_poll) Block(&in_poll);
    return FakeLauncher::Poll();
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  // Waits (5 s at most) until a call is blocked in *flag.
  static bool WaitBlocked(const std::atomic<bool>& flag) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!flag && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    return flag;
  }

  std::atomic<bool> block_launch{false}, block_poll{false};
  std::atomic<bool> in_launch{false}, in_poll{false};

 private:
  void Block(std::atomic<bool>* flag) {
    *flag = true;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kBlockFor, [&] { return released_; });
    *flag = false;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

class SlowLauncherTest : public JobManagerTest {
 protected:
  void SetUp() override {
    JobManagerTest::SetUp();
    if (HasFatalFailure()) return;
    manager_ = NewManager(&slow_);
  }
  void TearDown() override {
    slow_.Release();
    if (ticker_.joinable()) ticker_.join();
    JobManagerTest::TearDown();
  }
  std::string TokenFor(const std::string& id, int attempt) const {
    for (const LaunchRequest& r : slow_.launches)
      if (r.job_id == id && r.attempt == attempt) return r.env.at("SHARDD_WORKER_TOKEN");
    ADD_FAILURE() << "no launch of " << id << " attempt " << attempt;
    return "";
  }
  // A RUNNING job whose ranks heartbeat: submitted, launched, registered.
  std::string RunningJob(const std::string& name) {
    const std::string id = SubmitJob({}, name);
    manager_->Tick();
    const std::string token = TokenFor(id, 1);
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(Register(id, 1, r, token).ok());
    EXPECT_EQ(State(id), v1::RUNNING);
    return id;
  }
  // Heartbeats every rank of a running job a few times, each answered promptly.
  void ExpectPromptHeartbeats(const std::string& id, const std::string& token) {
    for (int round = 0; round < 3; ++round) {
      for (int r = 0; r < 2; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        auto hb = Heartbeat(id, 1, r, 5 + round, token);
        const auto took = std::chrono::steady_clock::now() - t0;
        EXPECT_TRUE(hb.ok()) << hb.status().ToString();
        EXPECT_LT(took, kPrompt) << "heartbeat waited "
                                 << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                 << " ms behind a blocked launcher call";
      }
    }
  }
  template <typename F>
  static std::chrono::steady_clock::duration Timed(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::steady_clock::now() - t0;
  }

  BlockingLauncher slow_;
  std::thread ticker_;
};

TEST_F(SlowLauncherTest, HeartbeatsAreAnsweredWhileALaunchBlocks) {
  const std::string running = RunningJob("tiny");
  const std::string token = TokenFor(running, 1);
  const std::string queued = SubmitJob({}, "second");
  slow_.block_launch = true;
  ticker_ = std::thread([&] { manager_->Tick(); });
  ASSERT_TRUE(BlockingLauncher::WaitBlocked(slow_.in_launch));

  ExpectPromptHeartbeats(running, token);
  EXPECT_LT(Timed([&] { EXPECT_EQ(State(queued), v1::LAUNCHING); }), kPrompt);
  EXPECT_LT(Timed([&] { EXPECT_EQ(manager_->List(false).size(), 2u); }), kPrompt);
  EXPECT_LT(Timed([&] { SubmitJob({}, "third"); }), kPrompt);

  slow_.Release();
  ticker_.join();
  EXPECT_EQ(State(queued), v1::LAUNCHING);
  EXPECT_EQ(Get(queued).workers(0).pid(), 4002) << "the launch's pids were applied";
}

TEST_F(SlowLauncherTest, HeartbeatsAreAnsweredWhileAPollBlocks) {
  const std::string running = RunningJob("tiny");
  const std::string token = TokenFor(running, 1);
  slow_.block_poll = true;
  ticker_ = std::thread([&] { manager_->Tick(); });
  ASSERT_TRUE(BlockingLauncher::WaitBlocked(slow_.in_poll));

  ExpectPromptHeartbeats(running, token);
  EXPECT_LT(Timed([&] { EXPECT_EQ(State(running), v1::RUNNING); }), kPrompt);

  slow_.Release();
  ticker_.join();
  EXPECT_EQ(State(running), v1::RUNNING);
}

TEST_F(SlowLauncherTest, ACancelDuringABlockedLaunchWinsAndLeavesNoOrphanAttempt) {
  const std::string id = SubmitJob();
  slow_.block_launch = true;
  ticker_ = std::thread([&] { manager_->Tick(); });
  ASSERT_TRUE(BlockingLauncher::WaitBlocked(slow_.in_launch));

  StatusOr<v1::JobStatus> cancelled = shard::Internal("not called");
  EXPECT_LT(Timed([&] { cancelled = manager_->Cancel(id, "not now"); }), kPrompt);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);

  slow_.Release();
  ticker_.join();
  ASSERT_EQ(slow_.launches.size(), 1u);
  EXPECT_EQ(State(id), v1::CANCELLED);
  EXPECT_EQ(Reason(id), "not now");
  // The launch that finished after the cancel was stopped, not left training.
  EXPECT_EQ(slow_.CountTerminates(id, 1, /*force=*/false), 1);
  EXPECT_FALSE(manager_->Drained(id));
  // Its workers are refused, and nothing launches again.
  const std::string token = TokenFor(id, 1);
  EXPECT_EQ(Register(id, 1, 0, token).status().code(), shard::StatusCode::kAborted);
  Advance(kKillGraceS);
  manager_->Tick();
  EXPECT_EQ(slow_.CountTerminates(id, 1, /*force=*/true), 1) << "SIGKILL after the grace";
  slow_.SetRunning(id, 1, 0);
  manager_->Tick();
  EXPECT_TRUE(manager_->Drained(id));
  Advance(60);
  manager_->Tick();
  EXPECT_EQ(slow_.launches.size(), 1u);
  EXPECT_EQ(State(id), v1::CANCELLED);
}

}  // namespace
}  // namespace shardd::testing
