// The job file's peft: section — parameter-efficient fine-tuning with LoRA
// adapters on a frozen base (method lora), or on a frozen base stored as NF4
// (method qlora). Defaults are PEFT's (LoraConfig): r 8, lora_alpha 8, dropout
// 0, A Kaiming-uniform and B zero, scale alpha/r (alpha/sqrt(r) with rsLoRA).
// Pure: no math; the adapter shapes live in shard/spec/lora_layout.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/enum_names.h"

namespace shard {

class YamlMap;

// peft.method. kNone: no peft: section (full fine-tuning).
enum class PeftMethod { kNone, kLora, kQlora };
inline constexpr EnumName<PeftMethod> kPeftMethodNames[] = {{PeftMethod::kLora, "lora"},
                                                           {PeftMethod::kQlora, "qlora"}};
inline const char* PeftMethodName(PeftMethod m) {
  return m == PeftMethod::kNone ? "none" : EnumToName(kPeftMethodNames, m);
}

// The linear layers of a Llama block an adapter may wrap, by their HF module
// names (peft.target_modules). Storage order of a layer's adapters.
// Mixture of experts: kRouter is PEFT's "gate" (the router mlp.gate /
// block_sparse_moe.gate, [E, d]; the suffix match does not reach gate_proj or
// shared_expert_gate), kSharedExpertGate qwen2_moe's mlp.shared_expert_gate
// ([1, d]). A model without the module has no adapter for it ("all-linear"
// lists every name; LoraLayout keeps those the model has, as PEFT's all-linear
// collects the model's nn.Linear names, the output layer excluded).
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown, kRouter, kSharedExpertGate };
inline constexpr int kNumLoraTargets = 9;
inline constexpr EnumName<LoraTarget> kLoraTargetNames[] = {
    {LoraTarget::kQ, "q_proj"},       {LoraTarget::kK, "k_proj"},   {LoraTarget::kV, "v_proj"},
    {LoraTarget::kO, "o_proj"},       {LoraTarget::kGate, "gate_proj"}, {LoraTarget::kUp, "up_proj"},
    {LoraTarget::kDown, "down_proj"}, {LoraTarget::kRouter, "gate"},
    {LoraTarget::kSharedExpertGate, "shared_expert_gate"}};
inline const char* LoraTargetName(LoraTarget t) { return EnumToName(kLoraTargetNames, t); }
// "self_attn" or "mlp": the HF submodule holding the target.
const char* LoraTargetModule(LoraTarget t);

// peft.init: how A starts (B always starts at zero, so step 0 is the base).
//   kaiming_uniform  PEFT's default (init_lora_weights=True): U(-1/sqrt(in), 1/sqrt(in))
//   gaussian         PEFT's "gaussian": N(0, 1/r)
enum class LoraInit { kKaimingUniform, kGaussian };
inline constexpr EnumName<LoraInit> kLoraInitNames[] = {{LoraInit::kKaimingUniform, "kaiming_uniform"},
                                                       {LoraInit::kGaussian, "gaussian"}};

struct PeftConfig {
  PeftMethod method = PeftMethod::kNone;
  int r = 8;                // adapter rank
  double alpha = 8;         // lora_alpha
  double dropout = 0.0;     // lora_dropout on the adapter's input, in [0, 1)
  // Which linears get adapters, in storage order, no duplicates. The job file
  // takes a list of names or "all-linear" (every linear of every block; the
  // LM head is never adapted). PEFT's default for Llama: q_proj, v_proj.
  std::vector<LoraTarget> target_modules = {LoraTarget::kQ, LoraTarget::kV};
  // target_modules came from "all-linear": the names the model lacks (the
  // router on a dense model) are dropped rather than refused.
  bool all_linear = false;
  bool use_rslora = false;  // scale alpha/sqrt(r) instead of alpha/r
  LoraInit init = LoraInit::kKaimingUniform;
  std::string from_adapter;  // a PEFT adapter folder to start from ("" = fresh adapters)
  // qlora only: NF4 blocks of block_size weights with an absmax scale each;
  // double_quant stores the scales in 8 bits (blocks of 256) as well.
  bool double_quant = false;
  int block_size = 64;

  bool enabled() const { return method != PeftMethod::kNone; }
  bool targets(LoraTarget t) const;
  // alpha / r, or alpha / sqrt(r) with use_rslora.
  double scale() const;
  // Messages start with "peft.<key>" (the caller adds the file).
  Status Validate() const;
};

// Maps the job file's peft: section (absent: method none). The section needs
// a method; block_size and double_quant are refused unless it is qlora.
Status MapPeftSection(YamlMap& root, PeftConfig* peft);

// "q_proj" | "all-linear" | ... one name → its targets; errors name the value
// and list what a Llama block has.
StatusOr<std::vector<LoraTarget>> ParseLoraTargets(const std::vector<std::string>& names);

}  // namespace shard
