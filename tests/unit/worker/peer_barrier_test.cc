// WaitForPeers: no rank starts its rendezvous before every rank of the attempt
// has registered, however late one comes (an external job's host whose link
// was down); the wait ends at its limit naming the missing ranks, and an
// attempt the coordinator ended is not waited out.
#include "worker/peer_barrier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "shard/common/kv_stores.h"

namespace shardd {
namespace {

using namespace std::chrono_literals;
using shard::StatusCode;

PeerBarrierOptions Opts(int rank, int world, std::chrono::milliseconds limit = 10s) {
  PeerBarrierOptions o;
  o.rank = rank;
  o.world = world;
  o.limit = limit;
  o.poll = 50ms;
  return o;
}

TEST(PeerBarrierTest, WaitsForALateRankLongerThanOnePoll) {
  shard::InMemoryKvStore kv;
  std::vector<shard::Status> got(3);
  std::vector<std::chrono::steady_clock::duration> took(3);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      if (r == 2) std::this_thread::sleep_for(400ms);  // eight polls late
      got[r] = WaitForPeers(kv, Opts(r, 3));
      took[r] = std::chrono::steady_clock::now() - t0;
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(got[r].ok()) << r << ": " << got[r].ToString();
    EXPECT_GE(took[r], 400ms) << "rank " << r << " left the barrier before rank 2 arrived";
  }
}

TEST(PeerBarrierTest, GivesUpAtTheLimitNamingTheMissingRanks) {
  shard::InMemoryKvStore kv;
  shard::Status st = WaitForPeers(kv, Opts(1, 4, 300ms));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(st.message().find("rank(s) 0, 2, 3 never registered"), std::string::npos) << st.ToString();
}

TEST(PeerBarrierTest, OneRankNeedsNoStore) {
  shard::InMemoryKvStore kv;
  EXPECT_TRUE(WaitForPeers(kv, Opts(0, 1, 1ms)).ok());
  EXPECT_FALSE(*kv.Check("peers/0"));
}

// A store in front of InMemoryKvStore that fails the first Sets with
// UNAVAILABLE (a coordinator restarting) or every Wait with `wait_error`.
class FlakyStore : public shard::KvStore {
 public:
  int unavailable_sets = 0;
  shard::StatusCode wait_error = shard::StatusCode::kOk;
  std::atomic<int> waits{0};
  shard::InMemoryKvStore inner;

  shard::Status Set(const std::string& k, const std::string& v) override {
    if (unavailable_sets > 0 && unavailable_sets--) return shard::Unavailable("coordinator restarting");
    return inner.Set(k, v);
  }
  shard::StatusOr<std::string> Get(const std::string& k, std::chrono::milliseconds t) override {
    return inner.Get(k, t);
  }
  shard::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    ++waits;
    if (wait_error != shard::StatusCode::kOk) return shard::Status(wait_error, "attempt 3 is over");
    return inner.Wait(keys, t);
  }
  shard::StatusOr<int64_t> Add(const std::string& k, int64_t d) override { return inner.Add(k, d); }
  shard::StatusOr<bool> Check(const std::string& k) override { return inner.Check(k); }
};

TEST(PeerBarrierTest, RetriesAnUnreachableCoordinator) {
  FlakyStore kv;
  kv.unavailable_sets = 3;
  ASSERT_TRUE(kv.inner.Set("peers/1", "1").ok());
  EXPECT_TRUE(WaitForPeers(kv, Opts(0, 2)).ok());
  EXPECT_TRUE(*kv.inner.Check("peers/0"));
}

TEST(PeerBarrierTest, AnEndedAttemptIsNotWaitedOut) {
  FlakyStore kv;
  kv.wait_error = StatusCode::kAborted;
  const auto t0 = std::chrono::steady_clock::now();
  shard::Status st = WaitForPeers(kv, Opts(0, 2, 10s));
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_EQ(kv.waits.load(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

}  // namespace
}  // namespace shardd
