// How many ranks a Slurm partition could place (slurm_capacity.h), from
// `scontrol show nodes -o` / `show job -o` / `show partition -o` text
// recorded on Slurm 22.05: free CPUs and GPUs of usable nodes in the job's
// shape, its own allocation counted as free; drained, down and other
// partitions' nodes count nothing.
#include "coordinator/launchers/slurm/slurm_capacity.h"

#include <gtest/gtest.h>

namespace shardd {
namespace {

// One node as `scontrol show nodes -o` prints it (22.05, the e2e cluster's).
std::string Node(const std::string& name, const std::string& state, int cpus, int alloc,
                 const std::string& partitions = "debug", const std::string& cfg_gres = "",
                 const std::string& alloc_gres = "") {
  return "NodeName=" + name + " Arch=x86_64 CoresPerSocket=1  CPUAlloc=" + std::to_string(alloc) +
         " CPUEfctv=" + std::to_string(cpus) + " CPUTot=" + std::to_string(cpus) +
         " CPULoad=2.92 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=" + name +
         " NodeHostName=" + name + " Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1 "
         "AllocMem=0 FreeMem=20816 Sockets=4 Boards=1 State=" + state +
         " ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=" + partitions +
         "  BootTime=2026-12-02T16:49:05 CfgTRES=cpu=" + std::to_string(cpus) + ",mem=1M,billing=4" + cfg_gres +
         " AllocTRES=" + (alloc ? "cpu=" + std::to_string(alloc) + alloc_gres : std::string()) +
         " CapWatts=n/a CurrentWatts=0\n";
}

TEST(SlurmCapacityTest, ParsesTheNodesOfScontrol) {
  auto nodes = ParseScontrolNodes(Node("vm", "MIXED", 4, 1) + Node("g1", "IDLE", 64, 0, "gpu,debug", ",gres/gpu=8"));
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].name, "vm");
  EXPECT_EQ((*nodes)[0].state, "MIXED");
  EXPECT_EQ((*nodes)[0].cpus, 4);
  EXPECT_EQ((*nodes)[0].cpus_alloc, 1);
  EXPECT_EQ((*nodes)[1].gpus, 8);
  EXPECT_EQ((*nodes)[1].partitions, (std::vector<std::string>{"gpu", "debug"}));
  EXPECT_FALSE(ParseScontrolNodes("garbage line\n").ok());
  EXPECT_TRUE(ParseScontrolNodes("No nodes in the system\n")->empty());
}

TEST(SlurmCapacityTest, OnlyNodesThatTakeJobsCount) {
  for (const char* ok : {"IDLE", "MIXED", "ALLOCATED", "IDLE+COMPLETING"}) EXPECT_TRUE(SlurmNodeUsable(ok)) << ok;
  for (const char* bad : {"IDLE+DRAIN", "MIXED+DRAIN", "DOWN*", "DOWN+NOT_RESPONDING", "IDLE*", "FUTURE",
                          "IDLE+MAINT", "IDLE+POWERED_DOWN", "IDLE+RESERVED", "DRAINED", ""})
    EXPECT_FALSE(SlurmNodeUsable(bad)) << bad;
}

TEST(SlurmCapacityTest, OneNodeOfCpuTasksCountsTheBestNode) {
  auto nodes = ParseScontrolNodes(Node("a", "MIXED", 4, 3) + Node("b", "MIXED", 8, 6) + Node("c", "IDLE+DRAIN", 8, 0));
  ASSERT_TRUE(nodes.ok());
  SlurmTaskShape one_node;  // unit 0: all tasks on one node, 1 CPU each
  EXPECT_EQ(PlaceableRanks(*nodes, {}, one_node, 4), 2) << "b's 2 free CPUs; a drained node counts nothing";
  one_node.cpus_per_task = 2;
  EXPECT_EQ(PlaceableRanks(*nodes, {}, one_node, 4), 1);
  // The job's own allocation on a (3 CPUs) is released before a resized attempt.
  one_node.cpus_per_task = 1;
  EXPECT_EQ(PlaceableRanks(*nodes, {{"a", {3, 0}}}, one_node, 4), 4);
  EXPECT_EQ(PlaceableRanks(*nodes, {{"a", {3, 0}}}, one_node, 3), 3) << "capped at the job's world size";
}

TEST(SlurmCapacityTest, WholeNodesOfGpuTasksInTheJobsPartition) {
  auto nodes = ParseScontrolNodes(Node("g1", "IDLE", 64, 0, "gpu", ",gres/gpu=8") +
                                  Node("g2", "MIXED", 64, 8, "gpu", ",gres/gpu=8", ",gres/gpu=4") +
                                  Node("g3", "IDLE", 64, 0, "gpu", ",gres/gpu=8") +
                                  Node("g4", "DOWN*", 64, 0, "gpu", ",gres/gpu=8") +
                                  Node("c1", "IDLE", 64, 0, "cpu"));
  ASSERT_TRUE(nodes.ok());
  SlurmTaskShape shape;
  shape.unit = 8;  // 8 tasks per node, one GPU each
  shape.gpus_per_task = 1;
  shape.cpus_per_task = 6;
  shape.partition = "gpu";
  EXPECT_EQ(PlaceableRanks(*nodes, {}, shape, 32), 16) << "g1 and g3; g2 has 4 GPUs free, g4 is down";
  EXPECT_EQ(PlaceableRanks(*nodes, {{"g2", {8, 4}}}, shape, 32), 24);
  shape.partition = "cpu";
  EXPECT_EQ(PlaceableRanks(*nodes, {}, shape, 32), 0) << "no GPUs in the cpu partition";
}

TEST(SlurmCapacityTest, AJobsHeldPlacesAndTheDefaultPartition) {
  const std::string running =
      "JobId=7 JobName=shardd-tiny-1-a3 JobState=RUNNING Reason=None NodeList=n[01-02],m5 NumNodes=3 NumCPUs=6 "
      "NumTasks=6 CPUs/Task=1 TRES=cpu=6,node=3,billing=6,gres/gpu=3\n";
  auto held = ParseHeldByJob(running);
  ASSERT_EQ(held.size(), 3u);
  EXPECT_EQ(held["n01"].cpus, 2);
  EXPECT_EQ(held["n02"].gpus, 1);
  EXPECT_EQ(held["m5"].cpus, 2);
  EXPECT_TRUE(ParseHeldByJob("JobId=8 JobState=PENDING Reason=Resources NodeList=(null) NumCPUs=4\n").empty());
  EXPECT_EQ(ExpandHostList("a[1-3,7],b"), (std::vector<std::string>{"a1", "a2", "a3", "a7", "b"}));
  EXPECT_EQ(DefaultPartition("PartitionName=gpu Default=NO Nodes=g1\nPartitionName=debug AllowGroups=ALL Default=YES "
                             "Nodes=vm\n"),
            "debug");
  EXPECT_EQ(DefaultPartition("PartitionName=gpu Default=NO\n"), "");
}

}  // namespace
}  // namespace shardd
