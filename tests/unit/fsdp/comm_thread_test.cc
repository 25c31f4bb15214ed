// The FSDP runtime's communication thread: jobs run in order, and a failure stops
// the ones queued after it.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace shard
