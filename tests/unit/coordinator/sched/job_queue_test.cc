// The local queue with a fake clock: priority then FIFO, backfill of jobs
// that fit, the anti-starvation reservation for a head that waited past the
// limit, and the reasons the waiting jobs show.
#include "coordinator/sched/job_queue.h"

#include <gtest/gtest.h>

namespace shardd::sched {
namespace {

QueueEntry Entry(const std::string& id, int priority, int64_t t, int gpus, int slots = 0) {
  static int64_t number = 0;
  QueueEntry e;
  e.job_id = id;
  e.priority = priority;
  e.enqueued_ms = t;
  e.number = ++number;
  e.demand.gpus = gpus;
  e.demand.cpu_slots = slots;
  return e;
}

HostAllocator Host(int gpus, int slots) {
  HostCapacity c;
  for (int g = 0; g < gpus; ++g) c.gpus.push_back(g);
  c.cpu_slots = slots;
  return HostAllocator(c);
}

std::vector<std::string> Started(const QueueDecision& d) {
  std::vector<std::string> ids;
  for (const auto& [id, p] : d.start) ids.push_back(id);
  return ids;
}

TEST(JobQueueTest, HigherPriorityFirstThenFifo) {
  HostAllocator host = Host(0, 2);
  std::vector<QueueEntry> q = {Entry("low-1", 0, 100, 0, 2), Entry("high-2", 5, 200, 0, 2),
                               Entry("mid-3", 1, 50, 0, 2), Entry("high-4", 5, 150, 0, 2)};
  QueueDecision d = DecideQueue(q, host, 1000, {});
  EXPECT_EQ(d.order, (std::vector<std::string>{"high-4", "high-2", "mid-3", "low-1"}));
  EXPECT_EQ(Started(d), (std::vector<std::string>{"high-4"}));
  EXPECT_EQ(d.waiting["high-2"], "waiting for 2 CPU slots: 0-1 held by job high-4");
  EXPECT_EQ(d.waiting.size(), 3u);
}

TEST(JobQueueTest, SmallJobsBackfillUntilTheHeadHasWaitedTooLong) {
  // 8 GPUs; a 4-GPU job runs; an 8-GPU job waits; 2-GPU jobs keep coming.
  HostAllocator host = Host(8, 16);
  Placement running;
  running.gpus = {0, 1, 2, 3};
  ASSERT_TRUE(host.Hold("run-1", running).ok());
  QueueOptions opts;
  opts.starvation_ms = 60'000;
  std::vector<QueueEntry> q = {Entry("big-2", 0, 0, 8), Entry("small-3", 0, 10'000, 2)};
  // Before the limit: the small job backfills onto free GPUs.
  QueueDecision d = DecideQueue(q, host, 30'000, opts);
  EXPECT_EQ(Started(d), (std::vector<std::string>{"small-3"}));
  EXPECT_EQ(d.start[0].second.gpus, (std::vector<int>{4, 5}));
  EXPECT_EQ(d.waiting["big-2"], "waiting for 8 GPUs: 0-3 held by job run-1");
  // Past the limit: GPUs 4-7 are reserved for big-2; small-3 waits behind it.
  d = DecideQueue(q, host, 61'000, opts);
  EXPECT_TRUE(d.start.empty());
  EXPECT_NE(d.waiting["big-2"].find("waited 61 s, so freed resources are reserved for it"), std::string::npos)
      << d.waiting["big-2"];
  EXPECT_EQ(d.waiting["small-3"],
            "waiting for 2 GPUs: 0-3 held by job run-1, 4-7 reserved for the head of the queue "
            "(behind job big-2, which holds a reservation)");
  // A CPU-only job still backfills: the reservation holds only what the head needs.
  q.push_back(Entry("cpu-4", 0, 2000, 0, 4));
  d = DecideQueue(q, host, 61'000, opts);
  EXPECT_EQ(Started(d), (std::vector<std::string>{"cpu-4"}));
  // run-1 ends: the head starts on all eight.
  host.Release("run-1");
  d = DecideQueue(q, host, 62'000, opts);
  ASSERT_FALSE(d.start.empty());
  EXPECT_EQ(d.start[0].first, "big-2");
  EXPECT_EQ(d.start[0].second.gpus.size(), 8u);
}

TEST(JobQueueTest, OneRoundNeverHandsOutAGpuTwice) {
  HostAllocator host = Host(8, 16);
  std::vector<QueueEntry> q;
  for (int i = 0; i < 6; ++i) q.push_back(Entry("j-" + std::to_string(i), 0, i, 3));
  QueueDecision d = DecideQueue(q, host, 10, {});
  ASSERT_EQ(d.start.size(), 2u);  // 3 + 3 of 8
  std::vector<int> all;
  for (const auto& [id, p] : d.start) all.insert(all.end(), p.gpus.begin(), p.gpus.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  EXPECT_EQ(d.waiting.size(), 4u);
}

}  // namespace
}  // namespace shardd::sched
