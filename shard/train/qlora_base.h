// QLoRA's frozen base (peft: method qlora): which units the FSDP runtime
// stores as NF4 and what stays in higher precision. As in the QLoRA paper and
// bitsandbytes/PEFT, only the linear layers are quantised: every decoder
// block's weight matrices (q, k, v, o, gate, up, down; a sparse block's
// experts' gate, up, down, but not its router [E, d]) become NF4; the block's
// 1-D tensors (RMSNorm weights, Qwen2 biases, Qwen3 q/k norms) stay in the
// compute dtype, and so do the token embedding and the final norm + LM head
// (those units are frozen shards as under LoRA: a quantised embedding or head
// costs accuracy for little memory in small models, and PEFT leaves both
// unquantised too).
#pragma once

#include <vector>

#include "shard/fsdp/nf4_shard.h"
#include "shard/spec/param_layout.h"

namespace shard {

// One entry per unit of `layout`.
std::vector<Nf4UnitSpec> QloraUnitSpecs(const ParamLayout& layout);

}  // namespace shard
