// The factory, rendezvous failures, sub-groups and local-only checks.
#include "shard/comm/communicator.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/unit/comm/comm_test_util.h"

namespace shard {
namespace {

using shard::testing::MakeConfig;
using shard::testing::UniquePrefix;
using shard::testing::Value;

const CommOptions kOpts{std::chrono::seconds(20)};

TEST(CommConfigTest, RejectsBadConfigsWithClearMessages) {
  auto store = std::make_shared<InMemoryKvStore>();
  auto bad_backend = CreateCommunicator(MakeConfig("mpi", 0, 1, store, "p/"));
  EXPECT_EQ(bad_backend.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_backend.status().message().find("mpi"), std::string::npos);

  auto bad_rank = CreateCommunicator(MakeConfig("local", 2, 2, store, "p/"));
  EXPECT_EQ(bad_rank.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_rank.status().message().find("rank 2"), std::string::npos);

  auto no_store = CreateCommunicator(MakeConfig("gloo", 0, 1, nullptr, "p/"));
  EXPECT_EQ(no_store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_store.status().message().find("store"), std::string::npos);

  // Without a GPU (or a CUDA build) nccl is unavailable, with a reason naming it;
  // with one it works (tests/gpu/comm covers that).
  auto nccl = CreateCommunicator(MakeConfig("nccl", 0, 1, store, "p/"));
  if (!nccl.ok()) {
    EXPECT_EQ(nccl.status().code(), StatusCode::kUnavailable) << nccl.status().ToString();
    EXPECT_NE(nccl.status().message().find("nccl"), std::string::npos);
  }
}

TEST(CommConfigTest, LocalBackendNeedsNoStore) {
  auto c = CreateCommunicator(MakeConfig("local", 0, 1, nullptr, UniquePrefix("nostore")));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  float x = 2;
  EXPECT_TRUE((*c)->AllReduce(&x, 1, ReduceOp::kSum, kOpts).ok());
  EXPECT_EQ(x, 2);
}

// Only rank 0 of 2 shows up: creation gives up after the timeout, naming what is missing.
class RendezvousTimeoutTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RendezvousTimeoutTest, CreationTimesOutWhenAPeerNeverJoins) {
  auto store = std::make_shared<InMemoryKvStore>();
  const auto start = std::chrono::steady_clock::now();
  auto c = CreateCommunicator(
      MakeConfig(GetParam(), 0, 2, store, UniquePrefix("lonely"), std::chrono::seconds(1)));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().ToString();
  EXPECT_NE(c.status().message().find("1"), std::string::npos) << c.status().ToString();
  EXPECT_GE(secs, 0.9);
  EXPECT_LE(secs, 5.0);
  // The message points at the missing rank: its rank number or its rendezvous key.
  EXPECT_TRUE(c.status().message().find("[1]") != std::string::npos ||
              c.status().message().find("gloo/1") != std::string::npos)
      << c.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, RendezvousTimeoutTest, ::testing::Values("local", "gloo"));

// Hybrid sharding: 4 ranks = 2 shard groups {0,1},{2,3} × 2 replicate groups {0,2},{1,3},
// each a communicator of its own next to the world communicator, used interleaved.
class SubGroupTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SubGroupTest, ShardAndReplicateGroupsWorkSideBySide) {
  const std::string backend = GetParam();
  const std::string job = UniquePrefix("hybrid");
  auto store = std::make_shared<InMemoryKvStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      const int node = r / 2, local = r % 2;
      auto world = CreateCommunicator(MakeConfig(backend, r, 4, store, job + "world"));
      auto shard = CreateCommunicator(
          MakeConfig(backend, local, 2, store, job + "shard" + std::to_string(node)));
      auto replicate = CreateCommunicator(
          MakeConfig(backend, node, 2, store, job + "replicate" + std::to_string(local)));
      ASSERT_TRUE(world.ok() && shard.ok() && replicate.ok());
      EXPECT_EQ((*shard)->rank(), local);
      EXPECT_EQ((*replicate)->world_size(), 2);
      for (int round = 0; round < 3; ++round) {
        // Shard group: reduce-scatter 2 blocks of 1000 within the node.
        std::vector<float> grads(2000), mine(1000);
        for (int i = 0; i < 2000; ++i) grads[i] = Value(r, i, round);
        ASSERT_OK((*shard)->ReduceScatter(grads.data(), mine.data(), 1000, ReduceOp::kSum, kOpts));
        for (int i = 0; i < 1000; i += 111) {
          const int idx = local * 1000 + i;
          ASSERT_EQ(mine[i], Value(node * 2, idx, round) + Value(node * 2 + 1, idx, round));
        }
        // Replicate group: average the shard across nodes.
        ASSERT_OK((*replicate)->AllReduce(mine.data(), 1000, ReduceOp::kAvg, kOpts));
        for (int i = 0; i < 1000; i += 111) {
          const int idx = local * 1000 + i;
          const float want = (Value(0, idx, round) + Value(1, idx, round) + Value(2, idx, round) +
                              Value(3, idx, round)) / 2;
          ASSERT_NEAR(mine[i], want, 1e-4);
        }
        // World: one all-reduce over everyone.
        float one = 1;
        ASSERT_OK((*world)->AllReduce(&one, 1, ReduceOp::kSum, kOpts));
        ASSERT_EQ(one, 4);
      }
    });
  }
  for (auto& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(Backends, SubGroupTest, ::testing::Values("local", "gloo"));

// The local backend also catches ranks that make different calls (gloo cannot).
TEST(LocalCommunicatorTest, MismatchedCollectivesFailOnEveryRank) {
  const std::string prefix = UniquePrefix("mismatch");
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto c = CreateCommunicator(MakeConfig("local", r, 2, nullptr, prefix));
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      std::vector<float> buf(20, 1.f);
      results[r] = r == 0 ? (*c)->AllReduce(buf.data(), 10, ReduceOp::kSum, kOpts)
                          : (*c)->AllGather(buf.data(), buf.data(), 10, kOpts);
      // Keep the communicator until both have their answer.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(results[r].ok());
    EXPECT_NE(results[r].message().find("AllReduce"), std::string::npos) << results[r].ToString();
    EXPECT_NE(results[r].message().find("AllGather"), std::string::npos) << results[r].ToString();
  }
}

TEST(LocalCommunicatorTest, APrefixCanNameANewGroupOnceTheOldOneFormed) {
  const std::string prefix = UniquePrefix("reuse");
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        auto c = CreateCommunicator(MakeConfig("local", r, 2, nullptr, prefix));
        ASSERT_TRUE(c.ok()) << c.status().ToString();
        float x = 1;
        ASSERT_OK((*c)->AllReduce(&x, 1, ReduceOp::kSum, kOpts));
        EXPECT_EQ(x, 2);
      });
    }
    for (auto& t : threads) t.join();
  }
}

}  // namespace
}  // namespace shard
