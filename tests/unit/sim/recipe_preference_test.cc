// The preference recipes (configs/jobs/llama3-70b-dpo-lora-8xa100-80gb.yaml,
// llama3-8b-dpo-full-8xa100-80gb.yaml): a preference: job on pairs that plans
// "fits" on 8x A100 80GB and whose simulated step (the real trainer on the
// memory simulator) peaks well inside the GPU, within 5% of the plan (both
// run the pairs' 2·micro_batch rows; docs/preference.md, issue 31).
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

TEST(PreferenceRecipes, PlanAndSimulateFittingOnEightA100s) {
  for (const auto& [file, shape, lora] : std::vector<std::tuple<std::string, std::string, bool>>{
           {"llama3-70b-dpo-lora-8xa100-80gb.yaml", "llama3-70b", true},
           {"llama3-8b-dpo-full-8xa100-80gb.yaml", "llama3-8b", false}}) {
    SCOPED_TRACE(file);
    auto job = LoadJobConfig(Root() + "/configs/jobs/" + file,
                             {"model.from_hf=" + Root() + "/configs/models/" + shape});
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    EXPECT_TRUE(job->preference.enabled());
    EXPECT_EQ(job->peft.enabled(), lora);
    auto planned = plan::PlanJob(*job, Catalog(), "8xA100-80GB-SXM");
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    EXPECT_EQ(planned->verdict, plan::Verdict::kFits) << plan::FormatPlanText(*planned);
    auto sim = SimulatePlannedJob(*job, *planned);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    std::printf("%s: plan %.2f GiB per GPU, %.0f tokens/s; device sim %.2f GiB, plan allocations %.2f GiB (%+.1f%%)\n",
                file.c_str(), plan::GiB(planned->memory.device_total), planned->time.tokens_per_s,
                plan::GiB(sim->simulated.device.bytes), plan::GiB(sim->estimate_device_alloc), 100 * sim->device_drift());
    EXPECT_LT(sim->simulated.device.bytes, int64_t{60} << 30) << FormatSimulationText(*sim);
    EXPECT_LT(std::abs(sim->device_drift()), 0.05) << FormatSimulationText(*sim);
  }
}

}  // namespace
}  // namespace shard::sim
