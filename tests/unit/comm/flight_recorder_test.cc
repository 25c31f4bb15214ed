// The flight recorder: the ring keeps the newest kCapacity records in order,
// a heartbeat's summary is each group's newest record (and its newest
// finished one while that is in flight), and a wrapped communicator records
// every call with the same sequence numbers on every rank — the op, unit and
// bytes, an in-flight call while a peer is late, and a failed one when the
// wait times out (ranks as threads over the local backend).
#include "shard/comm/flight_recorder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "shard/comm/timed_communicator.h"
#include "tests/unit/comm/comm_test_util.h"

namespace shard::testing {
namespace {

TEST(FlightRecorderTest, TheRingKeepsTheNewestRecordsInOrder) {
  FlightRecorder rec;
  const int g = rec.AddGroup("shard0", 4);
  EXPECT_EQ(rec.group_name(g), "shard0");
  EXPECT_EQ(rec.group_size(g), 4);
  const int n = static_cast<int>(FlightRecorder::kCapacity) + 10;
  for (int i = 1; i <= n; ++i) rec.End(rec.Begin(g, i, CollectiveOp::kAllGather, i % 7, 64), true);
  EXPECT_EQ(rec.count(), static_cast<uint64_t>(n));
  const auto tail = rec.Tail(5000);
  ASSERT_EQ(tail.size(), FlightRecorder::kCapacity);
  EXPECT_EQ(tail.front().seq, 11);
  EXPECT_EQ(tail.back().seq, n);
  for (const auto& r : tail) EXPECT_FALSE(r.in_flight());
  EXPECT_EQ(rec.Tail(2).front().seq, n - 1);
}

TEST(FlightRecorderTest, TheSummaryIsEachGroupsNewestAndItsLastFinished) {
  FlightRecorder rec;
  EXPECT_TRUE(rec.Summary().empty());
  const int shard = rec.AddGroup("shard0", 2), rep = rec.AddGroup("rep0", 2);
  rec.End(rec.Begin(shard, 1, CollectiveOp::kReduceScatter, 4, 128), true);
  const uint64_t in_flight = rec.Begin(shard, 2, CollectiveOp::kAllGather, 5, 64);
  rec.End(rec.Begin(rep, 1, CollectiveOp::kAllReduce, -1, 8), false);
  auto s = rec.Summary();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].seq, 1);  // shard0's last finished, then its call in flight
  EXPECT_FALSE(s[0].in_flight());
  EXPECT_EQ(s[1].seq, 2);
  EXPECT_TRUE(s[1].in_flight());
  EXPECT_EQ(s[1].unit, 5);
  EXPECT_EQ(s[2].group, rep);
  EXPECT_TRUE(s[2].failed);
  rec.End(in_flight, true);
  s = rec.Summary();
  ASSERT_EQ(s.size(), 2u);  // nothing in flight: one record per group
  EXPECT_EQ(s[0].seq, 2);
  EXPECT_FALSE(s[0].in_flight());
  const std::string line = rec.Describe(s[0], s[0].end_ns + 2'000'000'000);
  EXPECT_EQ(line.rfind("all_gather #2 (unit 5, 64 B, shard0) ended 2.00 s ago after ", 0), 0u) << line;
}

// Rank 1 joins the third call 300 ms late; rank 0's heartbeat meanwhile sees
// it in flight, with the same number rank 1 gives it.
TEST(FlightRecorderTest, AWrappedCommunicatorRecordsEveryCallAlikeOnEveryRank) {
  const std::string prefix = UniquePrefix("flight");
  std::vector<std::shared_ptr<FlightRecorder>> recs = {std::make_shared<FlightRecorder>(),
                                                       std::make_shared<FlightRecorder>()};
  std::vector<CollectiveRecord> while_waiting;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto raw = CreateCommunicator(MakeConfig("local", r, 2, nullptr, prefix));
      ASSERT_TRUE(raw.ok()) << raw.status().ToString();
      std::unique_ptr<Communicator> comm = WithWaitClock(std::move(*raw), recs[r], "shard0");
      std::vector<float> buf(2 * 16, 1.0f);
      CommOptions unit3;
      unit3.unit = 3;
      ASSERT_OK(comm->AllGather(buf.data() + r * 16, buf.data(), 16, unit3));
      ASSERT_OK(comm->ReduceScatter(buf.data(), buf.data() + r * 16, 16, ReduceOp::kSum, CommOptions{}));
      if (r == 1) {  // late: until rank 0 is inside call #3, and 300 ms more
        while (recs[0]->count() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
      double v = 1;
      ASSERT_OK(comm->AllReduce(&v, 1, ReduceOp::kSum, CommOptions{}));
    });
  }
  // Rank 0's summary while it waits for rank 1 in call #3.
  for (int i = 0; i < 2000 && while_waiting.empty(); ++i) {
    const auto s = recs[0]->Summary();
    if (!s.empty() && s.back().seq == 3 && s.back().in_flight()) while_waiting = s;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(while_waiting.size(), 2u) << "rank 0 was never seen waiting in call #3";
  EXPECT_EQ(while_waiting[0].seq, 2);
  EXPECT_EQ(while_waiting[1].op, CollectiveOp::kAllReduce);
  for (int r = 0; r < 2; ++r) {
    const auto tail = recs[r]->Tail(10);
    ASSERT_EQ(tail.size(), 3u) << "rank " << r;
    EXPECT_EQ(tail[0].seq, 1);
    EXPECT_EQ(tail[0].op, CollectiveOp::kAllGather);
    EXPECT_EQ(tail[0].unit, 3);
    EXPECT_EQ(tail[0].bytes, 16 * 4);
    EXPECT_EQ(tail[1].op, CollectiveOp::kReduceScatter);
    EXPECT_EQ(tail[1].bytes, 2 * 16 * 4);
    EXPECT_EQ(tail[1].unit, -1);
    EXPECT_EQ(tail[2].seq, 3);
    EXPECT_EQ(tail[2].bytes, 8);
    EXPECT_EQ(recs[r]->group_name(tail[2].group), "shard0");
  }
  const auto waited = recs[0]->Tail(1)[0];
  EXPECT_GT(waited.end_ns - waited.start_ns, 200'000'000) << "rank 0 waited for rank 1 inside call #3";
}

TEST(FlightRecorderTest, ACallThatTimesOutIsRecordedAsFailed) {
  const std::string prefix = UniquePrefix("flight_timeout");
  auto rec = std::make_shared<FlightRecorder>();
  // Rank 1 exists but never calls: rank 0's barrier times out.
  std::unique_ptr<Communicator> other;
  std::thread t([&] {
    auto raw = CreateCommunicator(MakeConfig("local", 1, 2, nullptr, prefix));
    ASSERT_TRUE(raw.ok()) << raw.status().ToString();
    other = std::move(*raw);
  });
  auto raw = CreateCommunicator(MakeConfig("local", 0, 2, nullptr, prefix));
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  t.join();
  std::unique_ptr<Communicator> comm = WithWaitClock(std::move(*raw), rec, "shard0");
  CommOptions o;
  o.timeout = std::chrono::milliseconds(100);
  const Status st = comm->Barrier(o);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  const auto s = rec->Summary();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].op, CollectiveOp::kBarrier);
  EXPECT_TRUE(s[0].failed);
  EXPECT_FALSE(s[0].in_flight());
}

TEST(FlightRecorderTest, WithoutARecorderNothingIsRecordedAndNullStaysNull) {
  EXPECT_EQ(WithWaitClock(nullptr, std::make_shared<FlightRecorder>(), "shard0"), nullptr);
}

}  // namespace
}  // namespace shard::testing
