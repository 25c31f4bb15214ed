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

namespace {

bool IsMlpTarget(LoraTarget t) { return t == LoraTarget::kGate || t == LoraTarget::kUp || t == LoraTarget::kDown; }

// Adds A then B of x at *off.
void Place(LoraLayout& l, LoraTensor x, int64_t* off, std::vector<LoraTensor>* into) {
  x.a_offset = *off;
  *off += x.in * l.r;
  x.b_offset = *off;
  *off += x.out * l.r;
  l.max_in = std::max(l.max_in, x.in);
  into->push_back(x);
}

}  // namespace

LoraLayout LoraLayout::For(const LlamaConfig& c, const PeftConfig& peft) {
  LoraLayout l;
  l.r = peft.r;
  l.num_layers = c.num_layers;
  l.mixtral_names = c.family == ModelFamily::kMixtral;
  bool any_dense = !c.is_moe(), any_sparse = false;
  if (c.is_moe()) {
    l.sparse.resize(c.num_layers);
    for (int i = 0; i < c.num_layers; ++i) {
      l.sparse[i] = c.sparse_layer(i) ? 1 : 0;
      (l.sparse[i] ? any_sparse : any_dense) = true;
    }
  }
  const int64_t hd = c.head_dim(), f = c.intermediate_size;
  const int64_t hq = static_cast<int64_t>(c.num_heads) * hd, hkv = static_cast<int64_t>(c.num_kv_heads) * hd;
  int64_t off = 0;
  for (LoraTarget t : peft.target_modules) {  // attention first (storage order)
    if (IsMlpTarget(t)) continue;
    LoraTensor x;
    x.target = t;
    LoraTargetDims(c, t, &x.in, &x.out);
    x.fused_width = t == LoraTarget::kO ? c.hidden_size : c.qkv_dim();
    x.fused_col = t == LoraTarget::kK ? hq : t == LoraTarget::kV ? hq + hkv : 0;
    Place(l, x, &off, &l.tensors);
  }
  const int64_t attention_end = off;
  for (LoraTarget t : peft.target_modules) {  // a dense layer's MLP
    if (!IsMlpTarget(t) || !any_dense) continue;
    LoraTensor x;
    x.target = t;
    LoraTargetDims(c, t, &x.in, &x.out);
    x.fused_width = t == LoraTarget::kDown ? c.hidden_size : 2 * f;
    x.fused_col = t == LoraTarget::kUp ? f : 0;
    Place(l, x, &off, &l.tensors);
  }
  const int64_t dense_end = off;
  off = attention_end;
  const int64_t d = c.hidden_size, fe = c.moe.expert_intermediate_size;
  for (int e = 0; any_sparse && e < c.moe.num_experts; ++e)
    for (LoraTarget t : peft.target_modules) {  // a sparse layer's experts: gate, up one [m, 2fe] output
      if (!IsMlpTarget(t)) continue;
      LoraTensor x;
      x.target = t;
      x.expert = e;
      x.in = t == LoraTarget::kDown ? fe : d;
      x.out = t == LoraTarget::kDown ? d : fe;
      x.fused_width = t == LoraTarget::kDown ? d : 2 * fe;
      x.fused_col = t == LoraTarget::kUp ? fe : 0;
      Place(l, x, &off, &l.experts);
      if (e == 0) ++l.expert_targets;
    }
  l.layer_numel = std::max(dense_end, off);
  return l;
}

std::vector<LoraTensor> LoraLayout::LayerTensors(int layer) const {
  if (!sparse_layer(layer)) return tensors;
  std::vector<LoraTensor> v;
  for (const LoraTensor& t : tensors)
    if (!IsMlpTarget(t.target)) v.push_back(t);
  v.insert(v.end(), experts.begin(), experts.end());
  return v;
}

const LoraTensor* LoraLayout::Expert(int e, LoraTarget target) const {
  if (expert_targets == 0) return nullptr;
  for (int i = 0; i < expert_targets; ++i) {
    const LoraTensor& t = experts[static_cast<size_t>(e) * expert_targets + i];
    if (t.target == target) return &t;
  }
  return nullptr;
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

int LoraBaseIndex(const LoraTensor& t) {
  if (t.expert < 0) return LoraBaseTensor(t.target);
  const ExpertProj p = t.target == LoraTarget::kGate ? kExpertGate : t.target == LoraTarget::kUp ? kExpertUp : kExpertDown;
  return ExpertTensor(t.expert, p);
}

const char* PeftTargetName(const LoraLayout& layout, LoraTarget t) {
  if (layout.mixtral_names && IsMlpTarget(t))
    return t == LoraTarget::kGate ? "w1" : t == LoraTarget::kUp ? "w3" : "w2";
  return LoraTargetName(t);
}

std::string PeftTensorName(const LoraLayout& layout, int layer, const LoraTensor& t, bool is_b) {
  if (t.expert < 0) return PeftTensorName(layer, t.target, is_b);
  return "base_model.model.model.layers." + std::to_string(layer) +
         (layout.mixtral_names ? ".block_sparse_moe.experts." : ".mlp.experts.") + std::to_string(t.expert) + "." +
         PeftTargetName(layout, t.target) + (is_b ? ".lora_B.weight" : ".lora_A.weight");
}

std::string PeftTensorName(int layer, LoraTarget target, bool is_b) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + LoraTargetModule(target) + "." +
         LoraTargetName(target) + (is_b ? ".lora_B.weight" : ".lora_A.weight");
}

}  // namespace shard
