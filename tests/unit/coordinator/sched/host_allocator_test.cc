// The local host's allocator: capacity, demand, specific devices and slots,
// never two holders of one GPU, reasons that name the holders, and the
// stored forms of demand and placement.
#include "coordinator/sched/host_allocator.h"

#include <gtest/gtest.h>

#include "coordinator/sched/host_capacity.h"
#include "shard/spec/job_config.h"

namespace shardd::sched {
namespace {

HostCapacity Gpus8() {
  HostCapacity c;
  for (int g = 0; g < 8; ++g) c.gpus.push_back(g);
  c.cpu_slots = 16;
  c.host_bytes = 64LL << 30;
  return c;
}

TEST(HostAllocatorTest, NeverFitsNamesTheNumbers) {
  HostAllocator a(Gpus8());
  Demand d;
  d.gpus = 16;
  Status st = a.CheckEverFits(d);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs 16 GPUs but the host has 8"), std::string::npos) << st.message();
  d = {};
  d.cpu_slots = 17;
  EXPECT_NE(a.CheckEverFits(d).message().find("needs 17 CPU slots but the host has 16"), std::string::npos);
  d = {};
  d.host_bytes = 65LL << 30;
  EXPECT_NE(a.CheckEverFits(d).message().find("65.0 GiB of host memory but the host has 64.0 GiB"), std::string::npos);
  d = {};
  d.pinned_gpu = 9;
  EXPECT_FALSE(a.CheckEverFits(d).ok());
  d = {};
  d.gpus = 8;
  d.cpu_slots = 16;
  EXPECT_TRUE(a.CheckEverFits(d).ok());
}

TEST(HostAllocatorTest, DisjointGpusAndReasonNamesTheHolder) {
  HostAllocator a(Gpus8());
  Demand four;
  four.gpus = 4;
  std::string why;
  auto p1 = a.TryPlace(four, {}, &why);
  ASSERT_TRUE(p1);
  EXPECT_EQ(p1->gpus, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_TRUE(a.Hold("a-1", *p1).ok());
  auto p2 = a.TryPlace(four, {}, &why);
  ASSERT_TRUE(p2);
  EXPECT_EQ(p2->gpus, (std::vector<int>{4, 5, 6, 7}));
  ASSERT_TRUE(a.Hold("b-2", *p2).ok());
  Demand eight;
  eight.gpus = 8;
  EXPECT_FALSE(a.TryPlace(eight, {}, &why));
  EXPECT_EQ(why, "waiting for 8 GPUs: 0-3 held by job a-1, 4-7 held by job b-2");
  a.Release("a-1");
  EXPECT_FALSE(a.TryPlace(eight, {}, &why));
  EXPECT_EQ(why, "waiting for 8 GPUs: 4-7 held by job b-2");
  a.Release("b-2");
  auto p3 = a.TryPlace(eight, {}, &why);
  ASSERT_TRUE(p3);
  EXPECT_EQ(p3->gpus.size(), 8u);
}

TEST(HostAllocatorTest, PrefersAContiguousBlock) {
  HostAllocator a(Gpus8());
  Placement one;
  one.gpus = {1};
  ASSERT_TRUE(a.Hold("x-1", one).ok());
  Demand three;
  three.gpus = 3;
  std::string why;
  auto p = a.TryPlace(three, {}, &why);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->gpus, (std::vector<int>{2, 3, 4}));
}

TEST(HostAllocatorTest, CpuSlotsAndMemory) {
  HostCapacity c;
  c.cpu_slots = 4;
  c.host_bytes = 10LL << 30;
  HostAllocator a(c);
  Demand d;
  d.cpu_slots = 2;
  d.host_bytes = 4LL << 30;
  std::string why;
  auto p = a.TryPlace(d, {}, &why);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->cpu_slots, (std::vector<int>{0, 1}));
  ASSERT_TRUE(a.Hold("a-1", *p).ok());
  auto q = a.TryPlace(d, {}, &why);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->cpu_slots, (std::vector<int>{2, 3}));
  ASSERT_TRUE(a.Hold("b-2", *q).ok());
  d.cpu_slots = 1;
  EXPECT_FALSE(a.TryPlace(d, {}, &why));
  EXPECT_EQ(why, "waiting for 1 CPU slot: 0-1 held by job a-1, 2-3 held by job b-2");
  a.Release("b-2");
  d.host_bytes = 7LL << 30;  // 6 GiB free
  EXPECT_FALSE(a.TryPlace(d, {}, &why));
  EXPECT_EQ(why, "waiting for 7.0 GiB of host memory: 6.0 GiB of 10.0 GiB free");
}

TEST(HostAllocatorTest, HoldReportsAnOverlapButKeepsIt) {
  HostAllocator a(Gpus8());
  Placement p;
  p.gpus = {0, 1};
  ASSERT_TRUE(a.Hold("a-1", p).ok());
  Status st = a.Hold("b-2", p);  // a restored placement that clashes: still held, reported
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("GPU 0 is also held by job a-1"), std::string::npos) << st.message();
  EXPECT_NE(a.HeldBy("b-2"), nullptr);
  Placement slots;
  slots.cpu_slots = {3};
  ASSERT_TRUE(a.Hold("c-3", slots).ok());
  st = a.Hold("d-4", slots);
  EXPECT_NE(st.message().find("CPU slot 3 is also held by job c-3"), std::string::npos) << st.message();
}

TEST(HostAllocatorTest, EncodedFormsRoundTrip) {
  Placement p;
  p.gpus = {4, 5, 6, 7};
  p.cpu_slots = {0, 1};
  p.host_bytes = 12345;
  auto back = Placement::Decode(p.Encode());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->gpus, p.gpus);
  EXPECT_EQ(back->cpu_slots, p.cpu_slots);
  EXPECT_EQ(back->host_bytes, 12345);
  EXPECT_EQ(p.Describe(), "GPUs 4-7, CPU slots 0-1, 0.0 GiB");
  Demand d;
  d.gpus = 2;
  d.pinned_gpu = -1;
  d.cpu_slots = 3;
  d.host_bytes = 77;
  auto dd = Demand::Decode(d.Encode());
  ASSERT_TRUE(dd.ok());
  EXPECT_EQ(dd->Encode(), d.Encode());
  EXPECT_FALSE(Placement::Decode("gpus=a").ok());
  EXPECT_FALSE(Demand::Decode("gpus=-3").ok());
}

TEST(HostCapacityTest, GpuFlagAndDemandOfASpec) {
  auto g = ParseGpuList("0-3,6");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, (std::vector<int>{0, 1, 2, 3, 6}));
  EXPECT_FALSE(ParseGpuList("0,0").ok());
  EXPECT_FALSE(ParseGpuList("3-1").ok());
  EXPECT_NE(ParseGpuList("x").status().message().find("--gpus 'x'"), std::string::npos);
  EXPECT_TRUE(ParseGpuList("none")->empty());

  CapacityOptions o;
  o.probed_gpus = 8;
  o.cpu_slots = 2;
  o.host_bytes = 0;
  const HostCapacity cap = MakeCapacity(o);
  EXPECT_EQ(cap.gpus.size(), 8u);
  shard::JobConfig job;
  job.parallel.world_size = 4;
  auto d = DemandOf(job, cap, 100);  // auto on a GPU host: a GPU per rank
  ASSERT_TRUE(d);
  EXPECT_EQ(d->gpus, 4);
  EXPECT_EQ(d->cpu_slots, 0);
  job.resources.device = *shard::ParseDeviceSpec("cpu");
  EXPECT_EQ(DemandOf(job, cap, 0)->cpu_slots, 4);
  job.resources.device = *shard::ParseDeviceSpec("cuda:5");
  EXPECT_EQ(DemandOf(job, cap, 0)->pinned_gpu, 5);
  job.resources.launcher = shard::Launcher::kSlurm;
  EXPECT_FALSE(DemandOf(job, cap, 0));  // the cluster's scheduler owns it
}

TEST(HostCapacityTest, PlacementEnvironment) {
  Placement p;
  p.gpus = {4, 5};
  Demand d;
  d.gpus = 2;
  auto env = PlacementEnv(p, d, 2);
  ASSERT_EQ(env.size(), 1u);
  EXPECT_EQ(env[0], std::make_pair(std::string("CUDA_VISIBLE_DEVICES"), std::string("4,5")));
  Placement c;
  c.cpu_slots = {2, 3, 4, 5};
  Demand cd;
  cd.cpu_slots = 4;
  env = PlacementEnv(c, cd, 2);
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(m["OMP_NUM_THREADS"], "2");
  EXPECT_EQ(m["OPENBLAS_NUM_THREADS"], "2");
  EXPECT_EQ(m["SHARDD_NUM_THREADS"], "2");
  EXPECT_EQ(m["SHARDD_CPU_SLOTS"], "2,3,4,5");
}

}  // namespace
}  // namespace shardd::sched
