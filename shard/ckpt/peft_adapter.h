// PEFT's LoRA adapter folder (what transformers, PEFT and vLLM load):
//   adapter_config.json        peft_type LORA, r, lora_alpha, lora_dropout,
//                              target_modules, use_rslora, bias none,
//                              task_type CAUSAL_LM, base_model_name_or_path
//   adapter_model.safetensors  base_model.model.model.layers.N.<module>.lora_A.weight [r, in]
//                              and .lora_B.weight [out, r] per targeted linear
// Layers are flat buffers in LoraLayout order (shard/spec/lora_layout.h).
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/lora_layout.h"
#include "shard/spec/peft_config.h"
#include "shard/tensor/dtype.h"

namespace shard {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";

// Writes both files into dir (created if missing), each atomically.
Status WritePeftAdapter(const std::string& dir, const PeftConfig& peft, const LoraLayout& layout,
                        const std::string& base_model, const std::vector<std::vector<float>>& layers, DType dtype);

// The PeftConfig a PEFT LoRA folder was trained with (method lora, r,
// lora_alpha, lora_dropout, target_modules, use_rslora), for loading it on
// its own (shardctl eval/generate --adapter). Errors name the file and key.
StatusOr<PeftConfig> ReadPeftAdapterConfig(const std::string& dir);

// Reads a PEFT LoRA folder into layers (resized to layout.num_layers buffers of
// layer_numel). Refuses, naming the file and the key, a folder that is not
// LoRA, whose r or target_modules disagree with the job's `peft`, or whose
// tensors are missing or have other shapes (another base model).
Status ReadPeftAdapter(const std::string& dir, const PeftConfig& peft, const LoraLayout& layout,
                       std::vector<std::vector<float>>* layers);

}  // namespace shard
