// Where every LoRA adapter lives: one flat fp32 buffer per decoder layer
// holding, for each targeted linear in LoraTarget order, A [r, in] then
// B [out, r] (PEFT's lora_A / lora_B weight shapes). Also where each target's
// output sits inside the model's fused GEMMs (q,k,v share one output of
// qkv_dim columns, gate,up one of 2*ffn), so the model can add an adapter's
// product straight into its column range. Pure arithmetic on a LlamaConfig and
// a PeftConfig, shared by the model, the trainer and PEFT import/export.
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
};

struct LoraLayout {
  int r = 0;
  std::vector<LoraTensor> tensors;  // one layer's adapters, storage order (same for every layer)
  int64_t layer_numel = 0;          // floats per layer buffer
  int num_layers = 0;
  int64_t max_in = 0;               // widest adapter input (scratch sizing)

  static LoraLayout For(const LlamaConfig& config, const PeftConfig& peft);
  int64_t total_numel() const { return layer_numel * num_layers; }
  // Index into tensors of `target`, or -1 when it has no adapter.
  int Find(LoraTarget target) const;
};

// The input and output features of `target` in a Llama block.
void LoraTargetDims(const LlamaConfig& config, LoraTarget target, int64_t* in, int64_t* out);

// The base weight `target` wraps, as a tensor index of a block unit.
BlockTensor LoraBaseTensor(LoraTarget target);

// PEFT's tensor name: "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight".
std::string PeftTensorName(int layer, LoraTarget target, bool is_b);

}  // namespace shard
