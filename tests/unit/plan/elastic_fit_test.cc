// The planner's check before an elastic restart runs a job on fewer ranks
// (shard/plan/elastic_fit.h): the 70B recipe fits its 8 A100s and still 4,
// but not 2 (each GPU's parameter shard alone doubles), and the refusal says
// so in one line.
#include "shard/plan/elastic_fit.h"

#include <gtest/gtest.h>

#include "tests/unit/plan/catalog_fixture.h"

namespace shard::plan {
namespace {

using testing_catalog::Catalog;
using testing_catalog::Root;

JobConfig Recipe70b() {
  auto job = LoadJobConfig(Root() + "/configs/jobs/llama3-70b-sft-8xa100-80gb.yaml",
                           {"resources.launcher=external", "restart.min_world_size=2"});
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (!job.ok()) return {};
  job->model.from_hf = Root() + "/" + job->model.from_hf;
  return *job;
}

TEST(ElasticFitTest, SmallerWorldsArePlannedBeforeUse) {
  const JobConfig job = Recipe70b();
  EXPECT_TRUE(CheckFitsAtWorldSize(job, 8, Catalog(), "8xA100-80GB-SXM").ok());
  Status four = CheckFitsAtWorldSize(job, 4, Catalog(), "8xA100-80GB-SXM");
  EXPECT_TRUE(four.ok()) << four.ToString();
  Status two = CheckFitsAtWorldSize(job, 2, Catalog(), "8xA100-80GB-SXM");
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(two.message().find("on 2 of 8 ranks the planner says: "), std::string::npos) << two.message();
  EXPECT_NE(two.message().find("does not fit"), std::string::npos) << two.message();
  EXPECT_EQ(two.message().find('\n'), std::string::npos);
}

TEST(ElasticFitTest, ASizeTheJobDoesNotAllowIsRefusedFirst) {
  Status three = CheckFitsAtWorldSize(Recipe70b(), 3, Catalog(), "8xA100-80GB-SXM");  // 64 % (2 x 3) != 0
  EXPECT_EQ(three.code(), StatusCode::kInvalidArgument) << three.ToString();
  Status one = CheckFitsAtWorldSize(Recipe70b(), 1, Catalog(), "8xA100-80GB-SXM");  // below min_world_size
  EXPECT_EQ(one.code(), StatusCode::kInvalidArgument) << one.ToString();
}

}  // namespace
}  // namespace shard::plan
