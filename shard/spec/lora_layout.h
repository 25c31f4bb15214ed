// Where every LoRA adapter lives: one flat fp32 buffer per decoder layer
// holding, for each targeted linear in LoraTarget order, A [r, in] then
// B [out, r] (PEFT's lora_A / lora_B weight shapes). Also where each target's
// output sits inside the model's fused GEMMs (q,k,v share one output of
// qkv_dim columns, gate,up one of 2*ffn), so the model can add an adapter's
// product straight into its column range. Pure arithmetic on a LlamaConfig and
// a PeftConfig, shared by the model, the trainer and PEFT import/export.
//
// Mixture of experts (qwen3_moe, mixtral): on a sparse layer the MLP targets
// (gate_proj, up_proj, down_proj; mixtral's w1, w3, w2) wrap every expert's
// projection, as PEFT's suffix match does: the layer's buffer holds the
// attention adapters (the same offsets as a dense layer's), then per expert j
// its gate, up, down adapters (`experts`). A dense layer of a MoE model (not
// sparse_layer) holds `tensors`. Every layer buffer is layer_numel floats (the
// larger of the two; a model whose layers are all sparse wastes nothing).
// After a sparse layer's experts come its other MLP adapters (`moe_tensors`,
// storage order): qwen2_moe's shared expert (mlp.shared_expert.gate_proj /
// up_proj / down_proj, wrapped by the same names as the experts', as PEFT's
// suffix match wraps them), the router when `gate` is named (mlp.gate /
// block_sparse_moe.gate [E, d]: its adapter adds into the router logits) and
// qwen2_moe's mlp.shared_expert_gate [1, d] when named. Unnamed, the router
// stays frozen.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"
#include "shard/spec/peft_config.h"

namespace shard {

struct LoraTensor {
  LoraTarget target = LoraTarget::kQ;
  int64_t in = 0;           // input features of the wrapped linear
  int64_t out = 0;          // output features of the wrapped linear
  int64_t fused_width = 0;  // columns of the model's (fused) output the linear writes into
  int64_t fused_col = 0;    // its first column there
  int64_t a_offset = 0;     // A [r, in] in the layer's flat buffer
  int64_t b_offset = 0;     // B [out, r]
  int expert = -1;          // the expert whose projection it wraps (sparse layers), else -1
  bool shared = false;      // qwen2_moe's shared expert's projection (moe_tensors)
  int base = -1;            // moe_tensors: the block tensor index it wraps (the router, the shared expert's)
};

struct LoraLayout {
  int r = 0;
  std::vector<LoraTensor> tensors;  // a dense layer's adapters, storage order (same for every dense layer)
  int64_t layer_numel = 0;          // floats per layer buffer
  int num_layers = 0;
  int64_t max_in = 0;               // widest adapter input (scratch sizing)
  // A sparse layer's: expert-major, per expert the targeted MLP projections in
  // storage order (the attention adapters are tensors' first, shared).
  std::vector<LoraTensor> experts;
  int expert_targets = 0;           // MLP targets per expert (experts.size() / num_experts)
  std::vector<uint8_t> sparse;      // per layer: 1 when it is a sparse (MoE) layer; empty for a dense model
  bool mixtral_names = false;       // PEFT names: block_sparse_moe.experts.{j}.w1/w3/w2
  // A sparse layer's router and shared-expert adapters (after its experts').
  std::vector<LoraTensor> moe_tensors;
  // The named targets the model has (storage order): what PEFT's
  // target_modules lists for it ("all-linear" on a dense model: no router).
  std::vector<LoraTarget> targets;

  static LoraLayout For(const LlamaConfig& config, const PeftConfig& peft);
  int64_t total_numel() const { return layer_numel * num_layers; }
  // Index into tensors of `target`, or -1 when it has no adapter.
  int Find(LoraTarget target) const;
  bool sparse_layer(int layer) const { return !sparse.empty() && sparse[layer]; }
  // Layer `layer`'s adapters in storage order (a sparse layer: the attention
  // ones, then the experts').
  std::vector<LoraTensor> LayerTensors(int layer) const;
  // Expert e's adapter on `target` (a sparse layer), or null.
  const LoraTensor* Expert(int e, LoraTarget target) const;
  // A sparse layer's adapter on the router (kRouter), the shared expert's
  // projection (shared, kGate/kUp/kDown) or its gate (kSharedExpertGate), or null.
  const LoraTensor* Moe(LoraTarget target, bool shared = false) const;
};

// Explicitly named targets the model lacks are refused with one line ('gate'
// on a model without sparse layers, 'shared_expert_gate' without a shared
// expert), as PEFT refuses a target_modules entry that matches nothing;
// "all-linear" drops them.
Status CheckLoraTargets(const LlamaConfig& config, const PeftConfig& peft);

// The input and output features of `target` in a Llama block.
void LoraTargetDims(const LlamaConfig& config, LoraTarget target, int64_t* in, int64_t* out);

// The base weight `target` wraps, as a tensor index of a block unit.
BlockTensor LoraBaseTensor(LoraTarget target);

// PEFT's tensor name: "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight".
// (A dense layer's targets; the router and the shared expert's are named by the layout's overload.)
std::string PeftTensorName(int layer, LoraTarget target, bool is_b);
// The same for any adapter of a layout, experts included:
// "base_model.model.model.layers.3.mlp.experts.5.down_proj.lora_B.weight",
// mixtral "...layers.3.block_sparse_moe.experts.5.w2.lora_B.weight"; the router
// "...layers.3.mlp.gate.lora_A.weight" (mixtral block_sparse_moe.gate), qwen2_moe's
// "...mlp.shared_expert.up_proj..." and "...mlp.shared_expert_gate...".
std::string PeftTensorName(const LoraLayout& layout, int layer, const LoraTensor& t, bool is_b);
// The target's module name as the family writes it (mixtral experts: w1, w3, w2).
const char* PeftTargetName(const LoraLayout& layout, LoraTarget target);

// The block tensor index (UnitSpec::tensors) an adapter wraps: an expert's
// projection (ExpertTensor) or the dense LoraBaseTensor.
int LoraBaseIndex(const LoraTensor& t);

}  // namespace shard
