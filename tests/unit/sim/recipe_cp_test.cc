// The context-parallel recipe (configs/jobs/llama3.1-70b-sft-32k-cp-8xa100-80gb.yaml:
// Llama 3.1 70B full SFT at 32,768 tokens on 8x A100 80GB): it plans to fit,
// and the memory simulator, running the real trainer's CP code (the CP group
// on the simulated communicator, CpAttention's chunk attention on the
// simulated backend), peaks within 5% of the plan at C = 2, 4 and 8; at C = 1
// the same job does not fit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "shard/sim/sim_report.h"
#include "tests/unit/plan/catalog_fixture.h"

namespace shard::sim {
namespace {

using plan::testing_catalog::Catalog;
using plan::testing_catalog::Root;

StatusOr<JobConfig> Recipe(std::vector<std::string> sets = {}) {
  sets.push_back("model.from_hf=" + Root() + "/configs/models/llama3.1-70b");
  return LoadJobConfig(Root() + "/configs/jobs/llama3.1-70b-sft-32k-cp-8xa100-80gb.yaml", sets);
}

TEST(CpRecipe, PlansToFitAndMatchesTheSimulation) {
  for (int cp : {2, 4, 8}) {
    SCOPED_TRACE("context_parallel " + std::to_string(cp));
    auto job = Recipe({"parallel.context_parallel=" + std::to_string(cp)});
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    auto planned = plan::PlanJob(*job, Catalog(), "8xA100-80GB-SXM");
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    const std::string text = plan::FormatPlanText(*planned);
    EXPECT_TRUE(planned->ok()) << text;
    EXPECT_EQ(planned->workload.local_seq_len(), 32768 / cp);
    auto sim = SimulatePlannedJob(*job, *planned);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    std::printf("llama3.1-70b SFT 32k, C=%d, 8x A100-80GB: plan %.2f GiB per GPU (allocations %.2f GiB), %.0f "
                "tokens/s; simulated %.2f GiB (%+.1f%%), peak at %s\n",
                cp, plan::GiB(planned->memory.device_total), plan::GiB(sim->estimate_device_alloc),
                planned->time.tokens_per_s, plan::GiB(sim->simulated.device.bytes), 100 * sim->device_drift(),
                sim->simulated.device.where.c_str());
    EXPECT_LT(std::abs(sim->device_drift()), 0.05) << FormatSimulationText(*sim) << text;
    // 8 sequences over 8 / C data ranks: C micro-batches per rank, as planned.
    EXPECT_EQ(sim->simulated.micro_batches, cp);
    EXPECT_EQ(planned->time.micro_batches, cp);
  }
}

TEST(CpRecipe, WithoutContextParallelismItDoesNotFit) {
  auto job = Recipe({"parallel.context_parallel=1"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto planned = plan::PlanJob(*job, Catalog(), "8xA100-80GB-SXM");
  ASSERT_TRUE(planned.ok());
  EXPECT_EQ(planned->verdict, plan::Verdict::kDoesNotFit) << plan::FormatPlanText(*planned);
  bool offered = false;
  for (const auto& r : planned->recommendations)
    for (const auto& s : r.sets) offered |= s.rfind("parallel.context_parallel=", 0) == 0;
  EXPECT_TRUE(offered);
}

}  // namespace
}  // namespace shard::sim
