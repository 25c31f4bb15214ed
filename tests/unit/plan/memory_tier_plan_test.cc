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

}  // namespace
}  // namespace shard::plan
