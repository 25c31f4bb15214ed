// What a peft: job's adapters and frozen base occupy, counted from the same
// layouts the engine allocates from: LoraLayout (shard/spec/lora_layout.h)
// for the adapters LoraAdapters holds (parameters, gradients, AdamW m and v,
// fp32, on every rank), the buffers LlamaModel::SetLora adds (LoraScratch and
// the saved down-projections t), and NF4's storage for QLoRA (4 bits per
// weight plus its block's absmax: fp32, or with double quantisation an
// 8-bit code and one fp32 scale per 256 blocks).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"
#include "shard/spec/peft_config.h"

namespace shard::plan {

// Every linear of a Llama block (peft.target_modules: all-linear).
std::vector<LoraTarget> AllLoraTargets();

// Adapter parameters at rank r on `targets`, over all layers.
int64_t LoraParams(const LlamaConfig& config, int rank, const std::vector<LoraTarget>& targets = AllLoraTargets());

// Bits one NF4 weight takes with its share of the block's absmax.
double Nf4Bits(int block_size, bool double_quant);

// Elements (fp32 as built) of the buffers LlamaModel::SetLora allocates for
// micro-batches of `rows` tokens.
struct LoraActivationElems {
  int64_t scratch = 0;  // LoraScratch: t and g [rows, r]; with dropout its input and gradient [rows, max_in]
  int64_t saved = 0;    // t = dropout(x)·Aᵀ per adapter of each saved layer set [rows, r]
  int64_t other = 0;    // the frozen final norm's unused weight gradient [d]
  int64_t total() const { return scratch + saved + other; }
};
LoraActivationElems LoraActivations(const LlamaConfig& config, int rank, const std::vector<LoraTarget>& targets,
                                    int64_t rows, bool checkpointing, bool dropout);

// Bytes `elems` elements of unit `u`'s frozen base take when held: the block
// linear weights in NF4 at `nf4_bits` (QLoRA; 0 = not quantised) and the
// rest at `other_bytes` per element (the unit's linear fraction applied to a
// padded or sharded count).
int64_t FrozenUnitBytes(const UnitSpec& u, int64_t elems, double nf4_bits, int64_t other_bytes);

}  // namespace shard::plan
