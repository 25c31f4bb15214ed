// The GPU placement table of a simulated 8-GPU host: the capacity comes from
// a fake `shardd-worker --probe --json` answer (eight A100-80GB), and two
// 4-rank jobs and one 8-rank job go through the queue as the JobManager
// drives it (decide, hold what starts, release what ends). Prints the table
// (ctest -R PlacementTable --output-on-failure -V shows it) and checks it.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

#include "coordinator/sched/host_capacity.h"
#include "coordinator/sched/job_queue.h"
#include "shard/plan/hardware.h"

namespace shardd::sched {
namespace {

std::string Row(const std::string& when, const HostAllocator& a, const QueueDecision& d) {
  std::ostringstream s;
  s << when;
  for (int g : a.capacity().gpus) {
    std::string owner = "-";
    for (const auto& [job, p] : a.held())
      for (int x : p.gpus)
        if (x == g) owner = job;
    s << " | " << owner;
  }
  for (const auto& [job, why] : d.waiting) s << "\n      " << job << " QUEUED: " << why;
  return s.str();
}

TEST(PlacementTableTest, TwoFourRankJobsAndOneEightRankJobOnAFakeEightGpuHost) {
  std::string probe = "{\"gpus\": [";
  for (int g = 0; g < 8; ++g) probe += std::string(g ? "," : "") + "{\"name\": \"NVIDIA A100-SXM4-80GB\", \"memory_gib\": 80}";
  probe += "]}";
  auto gpus = shard::plan::ProbedGpusFromJson(probe);
  ASSERT_TRUE(gpus.ok());
  CapacityOptions co;
  co.probed_gpus = static_cast<int>(gpus->size());
  co.cpu_slots = 32;
  co.host_bytes = 0;
  HostAllocator host(MakeCapacity(co));
  std::vector<QueueEntry> q;
  auto add = [&](const std::string& id, int64_t t, int ranks) {
    QueueEntry e;
    e.job_id = id;
    e.enqueued_ms = t;
    e.number = static_cast<int64_t>(q.size()) + 1;
    e.demand.gpus = ranks;
    q.push_back(e);
  };
  add("sft-a-1", 0, 4);
  add("sft-b-2", 1, 4);
  add("pretrain-8-3", 2, 8);
  std::ostringstream table;
  table << "t     | GPU 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7\n";
  auto round = [&](const std::string& when) {
    QueueDecision d = DecideQueue(q, host, 0, {});
    for (const auto& [id, p] : d.start) {
      ASSERT_TRUE(host.Hold(id, p).ok());
      std::erase_if(q, [&](const QueueEntry& e) { return e.job_id == id; });
    }
    table << Row(when, host, d) << "\n";
  };
  round("t=0  ");
  ASSERT_NE(host.HeldBy("sft-a-1"), nullptr);
  EXPECT_EQ(host.HeldBy("sft-a-1")->gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(host.HeldBy("sft-b-2")->gpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(host.HeldBy("pretrain-8-3"), nullptr);
  host.Release("sft-a-1");
  round("t=1  ");
  EXPECT_EQ(host.HeldBy("pretrain-8-3"), nullptr);  // 4 free of the 8 it needs
  host.Release("sft-b-2");
  round("t=2  ");
  ASSERT_NE(host.HeldBy("pretrain-8-3"), nullptr);
  EXPECT_EQ(host.HeldBy("pretrain-8-3")->gpus, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  std::cout << table.str();
  EXPECT_NE(table.str().find("pretrain-8-3 QUEUED: waiting for 8 GPUs: 0-3 held by job sft-a-1, 4-7 held by job sft-b-2"),
            std::string::npos);
}

}  // namespace
}  // namespace shardd::sched
