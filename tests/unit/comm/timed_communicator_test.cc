// The wait clock at the communicator seam: a wrapped communicator adds the
// time a thread spends in its collectives to that thread's total and to no
// other; the late rank (the one the others wait for) barely waits; results,
// names and errors are the wrapped backend's.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "shard/comm/comm_wait_clock.h"
#include "shard/comm/timed_communicator.h"
#include "tests/unit/comm/comm_test_util.h"

namespace shard::testing {
namespace {

TEST(TimedCommunicatorTest, TheRanksThatWaitForALateOneAreCharged) {
  constexpr double kLate = 0.3;  // seconds rank 2 computes before joining
  const std::string prefix = UniquePrefix("timed");
  std::vector<double> waited(3, -1), sums(3, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto raw = CreateCommunicator(MakeConfig("local", r, 3, nullptr, prefix));
      ASSERT_TRUE(raw.ok()) << raw.status().ToString();
      const std::string name = (*raw)->name();
      std::unique_ptr<Communicator> comm = WithWaitClock(std::move(*raw));
      EXPECT_EQ(comm->name(), name);
      EXPECT_EQ(comm->rank(), r);
      const double before = ThisThreadCommWaitSeconds();
      if (r == 2) std::this_thread::sleep_for(std::chrono::duration<double>(kLate));
      double v = r + 1;
      ASSERT_OK(comm->AllReduce(&v, 1, ReduceOp::kSum, CommOptions{}));
      sums[r] = v;
      waited[r] = ThisThreadCommWaitSeconds() - before;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(sums[r], 6.0) << "rank " << r;
  // Ranks 0 and 1 waited inside the call for rank 2; rank 2's sleep is its
  // compute, not waiting.
  EXPECT_GT(waited[0], 0.8 * kLate);
  EXPECT_GT(waited[1], 0.8 * kLate);
  EXPECT_LT(waited[2], 0.5 * kLate);
}

TEST(TimedCommunicatorTest, NullStaysNullAndOtherThreadsAreNotCharged) {
  EXPECT_EQ(WithWaitClock(nullptr), nullptr);
  const double mine = ThisThreadCommWaitSeconds();
  std::thread other([] {
    ScopedCommWait w;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  });
  other.join();
  EXPECT_EQ(ThisThreadCommWaitSeconds(), mine);
}

}  // namespace
}  // namespace shard::testing
