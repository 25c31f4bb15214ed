// The headline recipe (configs/jobs/llama3-70b-sft-8xa100-80gb.yaml: 70B full
// SFT from model.from_hf and data.jsonl on 8x A100 80GB) planned on a 2 TB
// host, a 1 TB host and 40 GB GPUs; its checkpoints on disk; and the step
// time priced from the engine's measured kernels against the measured H200
// point of docs/gpu.md.
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>

#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "tests/unit/plan/catalog_fixture.h"

namespace shard::plan {
namespace {

using testing_catalog::Catalog;
using testing_catalog::Root;

Plan PlanRecipe(const std::string& cluster) {
  // Relative paths in the job file (model.from_hf) are the repository's.
  auto job = LoadJobConfig(Root() + "/configs/jobs/llama3-70b-sft-8xa100-80gb.yaml",
                           {"model.from_hf=" + Root() + "/configs/models/llama3-70b"});
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_FALSE(job->model.from_hf.empty());
  EXPECT_FALSE(job->data.jsonl.empty());
  auto p = PlanJob(*job, Catalog(), cluster);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : Plan{};
}

TEST(Recipe70bTest, FitsTwoTerabyteHost) {
  const Plan p = PlanRecipe("8xA100-80GB-SXM");
  EXPECT_EQ(p.verdict, Verdict::kFits) << PlanSummary(p);
  EXPECT_TRUE(p.workload.from_hf);
  EXPECT_LT(GiB(p.memory.device_total), 60);
  EXPECT_GT(GiB(p.memory.host_total), 1024);  // 1.03 TiB of offloaded fp32 state
  EXPECT_LT(static_cast<double>(p.memory.host_total), p.host_capacity_bytes());
}

// fp32 state (16 B/param offloaded) cannot fit 1152 GiB: said so, and the
// first thing said is the fix (optim.state_dtype: bf16), with its numbers.
TEST(Recipe70bTest, OneTerabyteHostSaysBf16StateIsTheFix) {
  const Plan p = PlanRecipe("8xA100-80GB-SXM-1TB");
  EXPECT_EQ(p.verdict, Verdict::kDoesNotFit);
  ASSERT_FALSE(p.reasons.empty());
  EXPECT_NE(p.reasons[0].find("host memory"), std::string::npos) << p.reasons[0];
  ASSERT_FALSE(p.recommendations.empty());
  const Recommendation& r = p.recommendations.front();
  EXPECT_NE(r.change.find("bf16 optimizer state"), std::string::npos) << r.change;
  EXPECT_TRUE(r.supported);
  EXPECT_NE(std::find(r.sets.begin(), r.sets.end(), "optim.state_dtype=bf16"), r.sets.end());
  EXPECT_EQ(r.verdict, Verdict::kFits);
  EXPECT_LT(static_cast<double>(r.host_bytes), p.host_capacity_bytes());
  EXPECT_LT(static_cast<double>(r.host_bytes), 0.75e12);  // the bound for bf16 state
}

// The recipe with optim.state_dtype: bf16 on the 1 TB host: 10 B/param of
// offloaded state (bf16 master, m, v; fp32 gradients) instead of 16, under
// the 0.75 TB for the node, and it fits; checkpoints hold 6 B/param.
TEST(Recipe70bTest, Bf16StateFitsTheOneTerabyteHost) {
  auto job = LoadJobConfig(Root() + "/configs/jobs/llama3-70b-sft-8xa100-80gb.yaml",
                           {"model.from_hf=" + Root() + "/configs/models/llama3-70b", "optim.state_dtype=bf16"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto p = PlanJob(*job, Catalog(), "8xA100-80GB-SXM-1TB");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::printf("%s\n", FormatPlanText(*p).c_str());
  EXPECT_EQ(p->workload.optimizer_state, DType::kBF16);
  EXPECT_EQ(p->verdict, Verdict::kFits) << FormatPlanText(*p);
  EXPECT_LT(static_cast<double>(p->memory.host_total), 0.75e12);
  const double params = static_cast<double>(p->workload.model.NumParams());
  EXPECT_NEAR(static_cast<double>(p->checkpoint.bytes_per_checkpoint), params * 6, params * 0.001);
  const Plan fp = PlanRecipe("8xA100-80GB-SXM-1TB");
  EXPECT_NEAR(static_cast<double>(fp.memory.host_total - p->memory.host_total), params * 6, params * 0.01);
}

// 40 GB GPUs: the plan names what to change, with --set lines that fit.
TEST(Recipe70bTest, FortyGigabyteGpusSayWhatToChange) {
  const Plan p = PlanRecipe("8xA100-40GB-SXM");
  EXPECT_FALSE(p.ok());
  ASSERT_FALSE(p.recommendations.empty()) << FormatPlanText(p);
  bool fits_here = false;
  for (const auto& r : p.recommendations) fits_here |= r.verdict == Verdict::kFits || r.verdict == Verdict::kTight;
  EXPECT_TRUE(fits_here) << FormatPlanText(p);
}

// 70.6B parameters x (fp32 params + m + v) = 0.85 TB per checkpoint, two kept;
// a save is 106 GB per rank, 0.85 TB for the node at the catalog's 8 GB/s.
TEST(Recipe70bTest, CheckpointDiskFootprint) {
  const Plan p = PlanRecipe("8xA100-80GB-SXM");
  const CheckpointCost& c = p.checkpoint;
  const double params = static_cast<double>(p.workload.model.NumParams());
  EXPECT_NEAR(static_cast<double>(c.bytes_per_checkpoint), params * 12, params * 0.001);
  EXPECT_EQ(c.keep_last, 2);
  EXPECT_EQ(c.disk_bytes, 2 * c.bytes_per_checkpoint);
  EXPECT_EQ(c.bytes_per_node, c.bytes_per_checkpoint);  // all 8 writers on the one node
  EXPECT_DOUBLE_EQ(c.disk_write_gbs, 8);
  EXPECT_NEAR(c.save_s, c.bytes_per_node / 8e9, 1e-6);
  EXPECT_NE(FormatPlanText(p).find("per checkpoint"), std::string::npos);
}

// docs/gpu.md: llama3.2-1b on one H200, micro-batch 4 x 2048, TF32:
// 0.467 s/step, 17.5k tokens/s. Priced from the measured GEMM and attention
// rates (gpus.yaml measured:), the planner must land within 15%.
TEST(StepTimeFromKernels, ReproducesTheMeasuredH200Point) {
  auto cl = Catalog().Cluster("8xH200");
  ASSERT_TRUE(cl.ok());
  Workload w;
  auto m = LlamaPreset("llama3.2-1b");
  ASSERT_TRUE(m.ok());
  w.model = *m;
  w.compute = DType::kF32;
  w.tf32 = true;
  w.fp32_master = true;
  w.fp32_transients = true;
  w.world = 1;
  w.micro_batch = 4;
  w.seq_len = 2048;
  w.global_batch = 4;
  const StepTime t = EstimateStepTime(w, *cl);
  std::printf("llama3.2-1b on one H200, TF32: predicted %.0f tokens/s (step %.3f s: GEMMs %.3f, attention %.3f, "
              "elementwise %.3f, optimizer %.3f) vs 17,500 measured: %+.1f%%\n",
              t.tokens_per_s, t.step_s, t.gemm_s, t.attention_s, t.elementwise_s, t.optimizer_s,
              100 * (t.tokens_per_s / 17500 - 1));
  EXPECT_TRUE(t.from_kernels);
  EXPECT_NEAR(t.tokens_per_s, 17500, 0.15 * 17500) << "step " << t.step_s << " s: GEMMs " << t.gemm_s
                                                   << " attention " << t.attention_s << " elementwise "
                                                   << t.elementwise_s << " optimizer " << t.optimizer_s;
  // Strict fp32 (train.precision: fp32) prices its GEMMs at the fp32 rate.
  w.tf32 = false;
  const StepTime strict = EstimateStepTime(w, *cl);
  EXPECT_GT(strict.gemm_s, 5 * t.gemm_s);
}

}  // namespace
}  // namespace shard::plan
