// The memory checkpoint tier in the plan (checkpoint.memory): the tmpfs bytes
// per node by hand (keep_last + 1 steps of each writer rank's shard file, twice
// with partner copies across nodes), added to the node's host memory as one
// itemised line, and a job whose tier does not fit refused for host memory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shard/plan/memory_tier_cost.h"
#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "tests/unit/plan/catalog_fixture.h"

namespace shard::plan {
namespace {

using testing_catalog::Catalog;
using testing_catalog::Root;

TEST(MemoryTierPlanTest, BytesByHand) {
  const MemoryTierCost one = EstimateMemoryTier(2, 1, 1000, 12, 2, 1);
  EXPECT_EQ(one.bytes_per_step, 12000);
  EXPECT_EQ(one.steps, 3);
  EXPECT_EQ(one.copies, 1) << "one node: no partner copy";
  EXPECT_EQ(one.bytes_per_node, 2 * 3 * 12000);
  const MemoryTierCost two = EstimateMemoryTier(2, 1, 1000, 12, 2, 2);
  EXPECT_EQ(two.copies, 2);
  EXPECT_EQ(two.bytes_per_node, 2 * one.bytes_per_node);
  EXPECT_EQ(EstimateMemoryTier(2, 0, 1000, 12, 2, 2).bytes_per_node, one.bytes_per_node) << "replicas: 0";
  EXPECT_EQ(EstimateMemoryTier(0, 1, 1000, 12, 2, 2).bytes_per_node, 0) << "no memory tier";
}

Plan Plan70b(const std::vector<std::string>& sets) {
  auto job = LoadJobConfig(Root() + "/configs/jobs/llama3-70b-sft-8xa100-80gb.yaml", sets);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (job.ok() && !job->model.from_hf.empty() && job->model.from_hf[0] != '/')
    job->model.from_hf = Root() + "/" + job->model.from_hf;
  auto p = PlanJob(*job, Catalog(), "8xA100-80GB-SXM");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : Plan{};
}

TEST(MemoryTierPlanTest, TheTierIsHostMemoryAndA70bTierDoesNotFit) {
  const Plan base = Plan70b({});
  ASSERT_TRUE(base.ok()) << FormatPlanText(base);
  const Plan tier = Plan70b({"checkpoint.memory.every_steps=10", "checkpoint.memory.keep_last=2"});
  // 8 writer ranks x 3 steps x 8.82e9 shard elements x 12 B (fp32 p, m, v):
  // 2.5 TB of tmpfs on a 2 TB host.
  EXPECT_NEAR(static_cast<double>(tier.memory.host_total - base.memory.host_total), 8 * 3 * 8819213312.0 * 12, 1e6);
  bool itemised = false;
  for (const MemoryItem& i : tier.memory.host) itemised |= i.what.find("memory checkpoint tier") != std::string::npos;
  EXPECT_TRUE(itemised) << FormatPlanText(tier);
  EXPECT_EQ(tier.verdict, Verdict::kDoesNotFit);
  ASSERT_FALSE(tier.reasons.empty());
  EXPECT_NE(tier.reasons[0].find("host memory"), std::string::npos) << tier.reasons[0];
}

// The tier's folder has a size of its own (tmpfs): more bytes than it has
// free refuse the plan, above 80% is a note, unknown free space says nothing.
TEST(MemoryTierPlanTest, TheTierIsComparedWithItsFoldersFreeSpace) {
  std::vector<std::string> reasons, notes;
  JudgeMemoryTierSpace(3000, "2 writer ranks x 3 steps x 500 B", "/dev/shm/shardd-0", 2000, &reasons, &notes);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_TRUE(notes.empty());
  EXPECT_NE(reasons[0].find("/dev/shm/shardd-0, which has"), std::string::npos) << reasons[0];
  EXPECT_NE(reasons[0].find("2 writer ranks x 3 steps"), std::string::npos) << reasons[0];
  reasons.clear();
  JudgeMemoryTierSpace(900, "how", "/r", 1000, &reasons, &notes);
  EXPECT_TRUE(reasons.empty());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("above 80%"), std::string::npos) << notes[0];
  notes.clear();
  JudgeMemoryTierSpace(100, "how", "/r", 1000, &reasons, &notes);
  JudgeMemoryTierSpace(100, "how", "/r", -1, &reasons, &notes);
  EXPECT_TRUE(reasons.empty() && notes.empty());
  // The free space of a folder not made yet is its nearest ancestor's.
  EXPECT_GT(FreeBytesAt(testing::TempDir()), 0);
  EXPECT_EQ(FreeBytesAt(testing::TempDir() + "/not/made/yet"), FreeBytesAt(testing::TempDir()));
}

// shardctl plan and submission on this host: a tier larger than its folder's
// free space does not fit, with the line that says so.
TEST(MemoryTierPlanTest, ATierLargerThanItsFolderDoesNotFit) {
  auto job = LoadJobConfig(Root() + "/configs/jobs/tiny-cpu.yaml",
                           {"checkpoint.memory.every_steps=5", "checkpoint.memory.keep_last=100",
                            "checkpoint.memory.dir=" + testing::TempDir()});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto p = PlanJob(*job, Catalog(), "");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_GT(p->memory.memory_tier_bytes, 0);
  const int64_t free = FreeBytesAt(testing::TempDir());
  bool said = false;
  for (const std::string& r : p->reasons) said |= r.find("the memory checkpoint tier needs") != std::string::npos;
  EXPECT_EQ(said, p->memory.memory_tier_bytes > free) << FormatPlanText(*p);
  if (said) EXPECT_EQ(p->verdict, Verdict::kDoesNotFit);
}

}  // namespace
}  // namespace shard::plan
