// The FSDP runtime's communication thread: jobs run in order, a failure stops
// the ones queued after it, and a caller blocked on a communication task is
// charged on its wait clock (a host-work queue's callers are not).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "shard/comm/comm_wait_clock.h"
#include "shard/fsdp/comm_thread.h"
#include "shard/fsdp/fsdp_runtime.h"

namespace shard {
namespace {

TEST(CommThreadTest, RunsInOrderAndStopsAfterAFailure) {
  std::vector<int> seen;
  {
    CommThread t;
    auto a = t.Enqueue([&] { seen.push_back(1); return OkStatus(); });
    EXPECT_TRUE(t.Wait(a).ok());
    auto b = t.Enqueue([&] { seen.push_back(2); return Unavailable("peer 1 gone"); });
    auto c = t.Enqueue([&] { seen.push_back(3); return OkStatus(); });
    EXPECT_EQ(t.Wait(c).code(), StatusCode::kUnavailable);  // returns at the failure, not later
    EXPECT_EQ(t.Wait(b).message(), "peer 1 gone");
    EXPECT_EQ(t.Drain().code(), StatusCode::kUnavailable);
  }  // joins the thread
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));  // the task after the failure is skipped
}

TEST(CommThreadTest, ABlockedWaitIsChargedToTheWaiterOnlyForCommunication) {
  for (auto kind : {CommThread::Waits::kCommunication, CommThread::Waits::kLocalWork}) {
    CommThread t(kind);
    const double before = ThisThreadCommWaitSeconds();
    auto slow = t.Enqueue([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return OkStatus();
    });
    ASSERT_TRUE(t.Wait(slow).ok());
    const double charged = ThisThreadCommWaitSeconds() - before;
    if (kind == CommThread::Waits::kCommunication) {
      EXPECT_GT(charged, 0.1);
      // A finished task costs nothing to wait for.
      const double again = ThisThreadCommWaitSeconds();
      ASSERT_TRUE(t.Wait(slow).ok());
      EXPECT_EQ(ThisThreadCommWaitSeconds(), again);
    } else {
      EXPECT_EQ(charged, 0.0);
    }
  }
}

}  // namespace
}  // namespace shard
