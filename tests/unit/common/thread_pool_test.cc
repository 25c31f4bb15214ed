#include "shard/common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace shard {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    SetNumComputeThreads(threads);
    EXPECT_EQ(NumComputeThreads(), threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      ParallelFor(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
  SetNumComputeThreads(2);
}

TEST(ThreadPoolTest, RespectsGrain) {
  SetNumComputeThreads(2);
  std::atomic<int> calls{0};
  ParallelFor(10, 100, [&](int64_t b, int64_t e) {
    calls++;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
  });
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace shard
