// The job file's peft: section: PEFT's defaults when only the method is given,
// every key mapped, closed sets through their tables, one-line errors naming
// the file and the key for every bad value, and the adapter layout (shapes,
// offsets, fused-output columns, PEFT tensor names) it implies.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "shard/spec/job_config.h"
#include "shard/spec/lora_layout.h"
#include "shard/spec/run_fingerprint.h"

namespace shard {
namespace {

std::string Job(const std::string& peft) {
  return "name: tune\n"
         "model: {preset: tiny}\n"
         "data: {tokens: data/tokens.u32, seq_len: 16}\n"
         "train: {steps: 10, global_batch: 4, micro_batch: 2}\n"
         "parallel: {world_size: 2}\n" +
         peft;
}

void ExpectRefused(const std::string& peft, std::initializer_list<std::string> parts) {
  auto job = ParseJobConfig(Job(peft), "job.yaml");
  ASSERT_FALSE(job.ok()) << peft;
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = job.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "missing '" << p << "' in: " << m;
}

TEST(PeftConfig, AbsentMeansFullFineTuning) {
  auto job = ParseJobConfig(Job(""), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_FALSE(job->peft.enabled());
}

TEST(PeftConfig, DefaultsArePefts) {
  auto job = ParseJobConfig(Job("peft: {method: lora}\n"), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const PeftConfig& p = job->peft;
  EXPECT_EQ(p.method, PeftMethod::kLora);
  EXPECT_EQ(p.r, 8);
  EXPECT_EQ(p.alpha, 8);
  EXPECT_EQ(p.dropout, 0);
  EXPECT_EQ(p.target_modules, (std::vector<LoraTarget>{LoraTarget::kQ, LoraTarget::kV}));
  EXPECT_FALSE(p.use_rslora);
  EXPECT_EQ(p.init, LoraInit::kKaimingUniform);
  EXPECT_EQ(p.block_size, 64);
  EXPECT_FALSE(p.double_quant);
  EXPECT_DOUBLE_EQ(p.scale(), 1.0);
}

TEST(PeftConfig, EveryKeyMaps) {
  auto job = ParseJobConfig(Job("peft:\n  method: qlora\n  r: 16\n  alpha: 32\n  dropout: 0.05\n"
                                "  target_modules: [down_proj, q_proj, o_proj]\n  use_rslora: true\n"
                                "  init: gaussian\n  from_adapter: adapters/a\n  double_quant: true\n"
                                "  block_size: 128\n"),
                            "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const PeftConfig& p = job->peft;
  EXPECT_EQ(p.method, PeftMethod::kQlora);
  EXPECT_EQ(p.r, 16);
  EXPECT_DOUBLE_EQ(p.dropout, 0.05);
  // Storage order, whatever order the file uses.
  EXPECT_EQ(p.target_modules, (std::vector<LoraTarget>{LoraTarget::kQ, LoraTarget::kO, LoraTarget::kDown}));
  EXPECT_DOUBLE_EQ(p.scale(), 32.0 / 4.0);  // rsLoRA: alpha / sqrt(r)
  EXPECT_EQ(p.init, LoraInit::kGaussian);
  EXPECT_EQ(p.from_adapter, "adapters/a");
  EXPECT_TRUE(p.double_quant);
  EXPECT_EQ(p.block_size, 128);
}

TEST(PeftConfig, AllLinearAndOverrides) {
  auto job = ParseJobConfig(Job("peft: {method: lora, target_modules: all-linear}\n"), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  // Every name shardd adapts, the MoE router (gate) and qwen2_moe's shared_expert_gate
  // included; LoraLayout keeps those the model has, as PEFT's all-linear does.
  EXPECT_EQ(job->peft.target_modules.size(), 9u);
  EXPECT_TRUE(job->peft.all_linear);
  auto router = ParseJobConfig(Job("peft: {method: lora, target_modules: [gate, gate_proj]}\n"), "job.yaml");
  ASSERT_TRUE(router.ok()) << router.status().ToString();
  EXPECT_EQ(router->peft.target_modules, (std::vector<LoraTarget>{LoraTarget::kGate, LoraTarget::kRouter}));
  EXPECT_FALSE(router->peft.all_linear);
  // all-linear's fingerprint is the seven block names it had before the MoE
  // names existed (dense LoRA runs resume their checkpoints); naming gate counts.
  EXPECT_EQ(RunKeysOf(*job).at("peft.target_modules"), "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
  EXPECT_EQ(RunKeysOf(*router).at("peft.target_modules"), "gate_proj,gate");
  auto over = ParseJobConfig(Job("peft: {method: lora}\n"), "job.yaml", {"peft.r=4", "peft.alpha=16"});
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  EXPECT_DOUBLE_EQ(over->peft.scale(), 4.0);
}

TEST(PeftConfig, BadValuesNameTheKey) {
  ExpectRefused("peft: {r: 8}\n", {"job.yaml", "peft.method", "required"});
  ExpectRefused("peft: {method: dora}\n", {"job.yaml: peft.method", "'dora'", "lora, qlora"});
  ExpectRefused("peft: {method: lora, r: 0}\n", {"job.yaml", "peft.r", "got 0"});
  ExpectRefused("peft: {method: lora, alpha: -1}\n", {"job.yaml", "peft.alpha"});
  ExpectRefused("peft: {method: lora, dropout: 1.0}\n", {"job.yaml", "peft.dropout"});
  ExpectRefused("peft: {method: lora, target_modules: [q_proj, c_attn]}\n",
                {"job.yaml: peft.target_modules", "'c_attn' names nothing in the model", "down_proj"});
  ExpectRefused("peft: {method: lora, target_modules: []}\n", {"peft.target_modules"});
  ExpectRefused("peft: {method: lora, target_modules: [q_proj, q_proj]}\n", {"peft.target_modules", "twice"});
  ExpectRefused("peft: {method: lora, init: pissa}\n", {"peft.init", "kaiming_uniform, gaussian"});
  ExpectRefused("peft: {method: lora, block_size: 64}\n", {"peft.block_size", "only applies to method qlora"});
  ExpectRefused("peft: {method: lora, double_quant: true}\n", {"peft.double_quant", "qlora"});
  ExpectRefused("peft: {method: qlora, block_size: 48}\n", {"job.yaml", "peft.block_size", "power of two"});
  ExpectRefused("peft: {method: lora, rank: 4}\n", {"peft.rank"});
  ExpectRefused("peft: {method: lora, r: four}\n", {"peft.r"});
}

TEST(LoraLayout, ShapesOffsetsAndFusedColumns) {
  LlamaConfig c;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  PeftConfig p;
  p.method = PeftMethod::kLora;
  p.r = 2;
  p.target_modules = {LoraTarget::kK, LoraTarget::kV, LoraTarget::kUp, LoraTarget::kDown};
  LoraLayout l = LoraLayout::For(c, p);
  ASSERT_EQ(l.tensors.size(), 4u);
  // k: in 16, out 8 (2 kv heads of 4), columns [16, 24) of qkv (16 + 8 + 8 = 32 wide).
  EXPECT_EQ(l.tensors[0].in, 16);
  EXPECT_EQ(l.tensors[0].out, 8);
  EXPECT_EQ(l.tensors[0].fused_width, 32);
  EXPECT_EQ(l.tensors[0].fused_col, 16);
  EXPECT_EQ(l.tensors[1].fused_col, 24);
  EXPECT_EQ(l.tensors[2].fused_width, 48);  // gate | up
  EXPECT_EQ(l.tensors[2].fused_col, 24);
  EXPECT_EQ(l.tensors[3].in, 24);
  EXPECT_EQ(l.tensors[3].out, 16);
  // Back to back: A [r, in] then B [out, r] per target.
  EXPECT_EQ(l.tensors[0].a_offset, 0);
  EXPECT_EQ(l.tensors[0].b_offset, 32);
  EXPECT_EQ(l.tensors[1].a_offset, 48);
  EXPECT_EQ(l.layer_numel, (16 * 2 + 8 * 2) * 2 + (16 * 2 + 24 * 2) + (24 * 2 + 16 * 2));
  EXPECT_EQ(l.total_numel(), 3 * l.layer_numel);
  EXPECT_EQ(l.max_in, 24);
  EXPECT_EQ(l.Find(LoraTarget::kQ), -1);
  EXPECT_EQ(l.Find(LoraTarget::kUp), 2);
  EXPECT_EQ(PeftTensorName(5, LoraTarget::kQ, false), "base_model.model.model.layers.5.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(PeftTensorName(0, LoraTarget::kDown, true), "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
}

}  // namespace
}  // namespace shard
