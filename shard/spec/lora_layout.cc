#include "shard/spec/lora_layout.h"

#include <algorithm>

namespace shard {

void LoraTargetDims(const LlamaConfig& c, LoraTarget t, int64_t* in, int64_t* out) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim();
  const int64_t hq = static_cast<int64_t>(c.num_heads) * hd, hkv = static_cast<int64_t>(c.num_kv_heads) * hd;
  switch (t) {
    case LoraTarget::kQ: *in = d, *out = hq; return;
    case LoraTarget::kK:
    case LoraTarget::kV: *in = d, *out = hkv; return;
    case LoraTarget::kO: *in = hq, *out = d; return;
    case LoraTarget::kGate:
    case LoraTarget::kUp: *in = d, *out = f; return;
    case LoraTarget::kDown: *in = f, *out = d; return;
  }
}

LoraLayout LoraLayout::For(const LlamaConfig& c, const PeftConfig& peft) {
  LoraLayout l;
  l.r = peft.r;
  l.num_layers = c.num_layers;
  const int64_t hd = c.head_dim(), f = c.intermediate_size;
  const int64_t hq = static_cast<int64_t>(c.num_heads) * hd, hkv = static_cast<int64_t>(c.num_kv_heads) * hd;
  int64_t off = 0;
  for (LoraTarget t : peft.target_modules) {
    LoraTensor x;
    x.target = t;
    LoraTargetDims(c, t, &x.in, &x.out);
    switch (t) {
      case LoraTarget::kQ: x.fused_width = c.qkv_dim(), x.fused_col = 0; break;
      case LoraTarget::kK: x.fused_width = c.qkv_dim(), x.fused_col = hq; break;
      case LoraTarget::kV: x.fused_width = c.qkv_dim(), x.fused_col = hq + hkv; break;
      case LoraTarget::kO:
      case LoraTarget::kDown: x.fused_width = c.hidden_size, x.fused_col = 0; break;
      case LoraTarget::kGate: x.fused_width = 2 * f, x.fused_col = 0; break;
      case LoraTarget::kUp: x.fused_width = 2 * f, x.fused_col = f; break;
    }
    x.a_offset = off;
    off += x.in * l.r;
    x.b_offset = off;
    off += x.out * l.r;
    l.max_in = std::max(l.max_in, x.in);
    l.tensors.push_back(x);
  }
  l.layer_numel = off;
  return l;
}

int LoraLayout::Find(LoraTarget target) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].target == target) return static_cast<int>(i);
  return -1;
}

BlockTensor LoraBaseTensor(LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return kQ;
    case LoraTarget::kK: return kK;
    case LoraTarget::kV: return kV;
    case LoraTarget::kO: return kO;
    case LoraTarget::kGate: return kGate;
    case LoraTarget::kUp: return kUp;
    case LoraTarget::kDown: return kDown;
  }
  return kQ;
}

std::string PeftTensorName(int layer, LoraTarget target, bool is_b) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + LoraTargetModule(target) + "." +
         LoraTargetName(target) + (is_b ? ".lora_B.weight" : ".lora_A.weight");
}

}  // namespace shard
