// The mixture-of-experts recipe (configs/jobs/qwen3-30b-a3b-sft-8xa100-80gb.yaml):
// the planner counts the experts (total vs active parameters, the routed
// activation buffers, the experts in their layer's all-gather) and the real
// trainer's MoE code on the memory simulator peaks within 5% of the plan
// (docs/moe.md). LoRA on Qwen3-30B-A3B (8x A100) and QLoRA on Mixtral-8x7B
// (2x A100, NF4 experts) with adapters on every expert: planned and simulated.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "shard/plan/adapter_memory.h"
#include "shard/plan/moe_model.h"
#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "shard/sim/sim_report.h"
#include "tests/unit/plan/catalog_fixture.h"

namespace shard::sim {
namespace {

using plan::testing_catalog::Catalog;
using plan::testing_catalog::Root;

StatusOr<JobConfig> Recipe(std::vector<std::string> sets = {}) {
  return LoadJobConfig(Root() + "/configs/jobs/qwen3-30b-a3b-sft-8xa100-80gb.yaml", sets);
}

TEST(MoePlan, CountsActiveParametersAndRoutedRows) {
  auto c = LlamaPreset("qwen3-30b-a3b");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->NumParams(), 30532122624);
  // Published: 3.3B activated. 48 layers x 120 unchosen experts x 3·2048·768.
  EXPECT_EQ(plan::MoeActiveParams(*c), 30532122624 - int64_t{48} * 120 * 3 * 2048 * 768);
  EXPECT_NEAR(plan::MoeActiveParams(*c) / 1e9, 3.35, 0.01);
  const plan::MoeActivationElems a = plan::MoeActivations(*c, 4096, 1);
  EXPECT_EQ(a.routed_rows, 4096 * 8);
  EXPECT_GT(a.saved, int64_t{4096} * 8 * (3 * 768 + 2048));  // gu, h, y per routed row
  auto dense = LlamaPreset("llama3-8b");
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(plan::MoeActiveParams(*dense), dense->NumParams());
  EXPECT_EQ(plan::MoeActivations(*dense, 4096, 1).saved, 0);
}

TEST(MoePlan, Qwen3ThirtyBPlanMatchesSimulation) {
  // With activation checkpointing (the recipe: one routed set) and without
  // (48 sets of T·k routed rows: ~27 GiB, so a wrong routed-row count shows).
  for (const char* ac : {"true", "false"}) {
  SCOPED_TRACE(std::string("activation_checkpointing ") + ac);
  auto job = Recipe({std::string("parallel.activation_checkpointing=") + ac});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto planned = plan::PlanJob(*job, Catalog(), "8xA100-80GB-SXM");
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  const std::string text = plan::FormatPlanText(*planned);
  EXPECT_TRUE(planned->ok()) << text;  // fits (tight without checkpointing)
  EXPECT_LT(planned->memory.device_total, int64_t{80} << 30) << text;
  EXPECT_NE(text.find("3.35B active"), std::string::npos) << text;
  // The step time counts the active parameters: 6 x 3.35B, not 6 x 30.5B.
  EXPECT_LT(planned->time.model_flops_per_token, 6.0 * 5e9) << text;
  auto sim = SimulatePlannedJob(*job, *planned);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  std::printf("qwen3-30b-a3b full SFT (activation checkpointing %s), 8x A100-80GB: plan %.2f GiB per GPU (allocations %.2f GiB), %.0f tokens/s; "
              "simulated %.2f GiB (%+.1f%%); host plan %.2f GiB, simulated %.2f GiB per rank\n",
              ac, plan::GiB(planned->memory.device_total), plan::GiB(sim->estimate_device_alloc),
              planned->time.tokens_per_s, plan::GiB(sim->simulated.device.bytes), 100 * sim->device_drift(),
              plan::GiB(sim->estimate_host_alloc), plan::GiB(sim->simulated.host.bytes));
  EXPECT_LT(std::abs(sim->device_drift()), 0.05) << FormatSimulationText(*sim) << text;
  }
}

// qwen2_moe (Qwen1.5-MoE-A2.7B: 60 experts, top-4, a shared expert of 5632
// on every token): the planner counts the shared expert's buffers (per set
// [n, 2fs] + [n, fs] + [n, d] + the gate's n; scratch the identity
// permutation, the gate's gradient, dsy, dsh, dsgu) and its parameters as
// active; without checkpointing (24 sets) the real MoeMlp on the simulator
// peaks within 5% of the plan.
TEST(MoePlan, Qwen2MoeSharedExpertPlannedAndSimulated) {
  auto c = LlamaPreset("qwen1.5-moe-a2.7b");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  LlamaConfig no_shared = *c;
  no_shared.moe.shared_expert_intermediate_size = 0;
  const int64_t n = 4096, d = 2048, fs = 5632;
  const plan::MoeActivationElems a = plan::MoeActivations(*c, n, 3), b = plan::MoeActivations(no_shared, n, 3);
  EXPECT_EQ(a.saved - b.saved, 3 * (n * 2 * fs + n * fs + n * d + n));
  EXPECT_EQ(a.scratch - b.scratch, 2 * n + n * d + n * fs + n * 2 * fs);
  // Active: attention, router, 4 of 60 experts and the shared expert per layer.
  EXPECT_EQ(plan::MoeActiveParams(*c), c->NumParams() - int64_t{24} * 56 * 3 * 2048 * 1408);
  auto job = Recipe({"model.preset=qwen1.5-moe-a2.7b", "parallel.activation_checkpointing=false"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto planned = plan::PlanJob(*job, Catalog(), "8xA100-80GB-SXM");
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  auto sim = SimulatePlannedJob(*job, *planned);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  std::printf("qwen1.5-moe-a2.7b full SFT (no checkpointing), 8x A100-80GB: plan %.2f GiB per GPU (allocations "
              "%.2f GiB); simulated %.2f GiB (%+.1f%%)\n",
              plan::GiB(planned->memory.device_total), plan::GiB(sim->estimate_device_alloc),
              plan::GiB(sim->simulated.device.bytes), 100 * sim->device_drift());
  EXPECT_LT(std::abs(sim->device_drift()), 0.05) << FormatSimulationText(*sim) << plan::FormatPlanText(*planned);
}

// bf16 (two-byte activations and gathers; MoeMlp's routed sets stay fp32):
// the plan fits and matches the simulation.
TEST(MoePlan, Bf16PlanMatchesSimulation) {
  auto job = Recipe({"train.precision=bf16"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto planned = plan::PlanJob(*job, Catalog(), "8xA100-80GB-SXM");
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_TRUE(planned->ok()) << plan::FormatPlanText(*planned);
  auto sim = SimulatePlannedJob(*job, *planned);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  std::printf("qwen3-30b-a3b full SFT bf16, 8x A100-80GB: plan %.2f GiB per GPU (allocations %.2f GiB), %.0f "
              "tokens/s; simulated %.2f GiB (%+.1f%%)\n",
              plan::GiB(planned->memory.device_total), plan::GiB(sim->estimate_device_alloc),
              planned->time.tokens_per_s, plan::GiB(sim->simulated.device.bytes), 100 * sim->device_drift());
  EXPECT_LT(std::abs(sim->device_drift()), 0.05) << FormatSimulationText(*sim) << plan::FormatPlanText(*planned);
}

// The recipes configs/jobs/qwen3-30b-a3b-lora-8xa100-80gb.yaml,
// mixtral-8x7b-qlora-2xa100-80gb.yaml and qwen1.5-moe-a2.7b-lora-2xa100-80gb.yaml:
// adapters on everything PEFT's all-linear wraps (r 8, bf16): the attention,
// every expert's projections, the router, and qwen2_moe's shared expert and
// its gate. The trainable count is the layout's (48 layers x (128 experts x
// 3 + 4 attention + the router) adapters for Qwen3-30B-A3B), the frozen
// experts are gathered (NF4 under QLoRA), and the real LoRA trainer on the
// simulator peaks within 5% of the plan.
TEST(MoePlan, PeftOnExpertsPlansAndSimulates) {
  struct Item {
    const char* model;
    const char* method;
    int world;
    int64_t trainable;
  };
  // r 8: qwen3-30b-a3b per layer 128·(2·8·(2048+768) + 8·(768+2048)) + attention
  // 8·(2048+4096) + 2·8·(2048+512) + 8·(4096+2048) + the router 8·(2048+128);
  // mixtral 8 experts of 14336 and its router 8·(4096+8); qwen1.5-moe-a2.7b 60
  // experts of 1408, attention 4·8·(2048+2048), the shared expert of 5632, its
  // gate 8·(2048+1) and the router 8·(2048+60).
  const int64_t q_layer = 128 * 3 * 8 * (2048 + 768) + 8 * (2048 + 4096) + 2 * 8 * (2048 + 512) + 8 * (4096 + 2048) +
                          8 * (2048 + 128);
  const int64_t m_layer = 8 * 3 * 8 * (4096 + 14336) + 8 * (4096 + 4096) + 2 * 8 * (4096 + 1024) + 8 * (4096 + 4096) +
                          8 * (4096 + 8);
  const int64_t q2_layer = 60 * 3 * 8 * (2048 + 1408) + 4 * 8 * (2048 + 2048) + 3 * 8 * (2048 + 5632) +
                           8 * (2048 + 1) + 8 * (2048 + 60);
  for (const Item& it : {Item{"qwen3-30b-a3b", "lora", 8, 48 * q_layer}, Item{"mixtral-8x7b", "qlora", 2, 32 * m_layer},
                         Item{"qwen1.5-moe-a2.7b", "lora", 2, 24 * q2_layer}}) {
    SCOPED_TRACE(std::string(it.model) + " " + it.method);
    const std::string file = std::string(it.model) + "-" + it.method + "-" + std::to_string(it.world) + "xa100-80gb.yaml";
    auto job = LoadJobConfig(Root() + "/configs/jobs/" + file);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    auto planned = plan::PlanJob(*job, Catalog(), it.world == 8 ? "8xA100-80GB-SXM" : "2xA100-80GB-SXM");
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    const std::string text = plan::FormatPlanText(*planned);
    EXPECT_TRUE(planned->ok()) << text;
    EXPECT_EQ(plan::LoraParams(planned->workload.model, 8, planned->workload.lora_targets), it.trainable);
    auto sim = SimulatePlannedJob(*job, *planned);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    std::printf("%s %s all-linear r 8, %dx A100-80GB: %.1fM adapter parameters; plan %.2f GiB per GPU (allocations "
                "%.2f GiB), %.0f tokens/s; simulated %.2f GiB (%+.1f%%)\n",
                it.model, it.method, it.world, it.trainable / 1e6, plan::GiB(planned->memory.device_total),
                plan::GiB(sim->estimate_device_alloc), planned->time.tokens_per_s,
                plan::GiB(sim->simulated.device.bytes), 100 * sim->device_drift());
    EXPECT_LT(std::abs(sim->device_drift()), 0.05) << FormatSimulationText(*sim) << text;
  }
}

}  // namespace
}  // namespace shard::sim
