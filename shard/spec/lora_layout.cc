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
    case LoraTarget::kRouter: *in = d, *out = c.moe.num_experts; return;
    case LoraTarget::kSharedExpertGate: *in = d, *out = 1; return;
  }
}

namespace {

bool IsMlpTarget(LoraTarget t) { return t == LoraTarget::kGate || t == LoraTarget::kUp || t == LoraTarget::kDown; }
bool IsAttentionTarget(LoraTarget t) { return t <= LoraTarget::kO; }

// Adds A then B of x at *off.
void Place(LoraLayout& l, LoraTensor x, int64_t* off, std::vector<LoraTensor>* into) {
  x.a_offset = *off;
  *off += x.in * l.r;
  x.b_offset = *off;
  *off += x.out * l.r;
  l.max_in = std::max(l.max_in, x.in);
  into->push_back(x);
}

// A sparse layer's adapters after its experts': the shared expert's
// projections (qwen2_moe, named like the experts'), the router, the shared
// expert's gate.
void PlaceMoeTensors(const LlamaConfig& c, const PeftConfig& peft, bool any_sparse, LoraLayout* l, int64_t* off) {
  if (!any_sparse) return;
  const int E = c.moe.num_experts;
  const int64_t d = c.hidden_size, fs = c.moe.shared_expert_intermediate_size;
  const bool shared = c.moe.has_shared_expert();
  for (LoraTarget t : peft.target_modules) {
    LoraTensor x;
    x.target = t;
    if (IsMlpTarget(t) && shared) {
      const bool down = t == LoraTarget::kDown;
      x.shared = true;
      x.in = down ? fs : d;
      x.out = down ? d : fs;
      x.fused_width = down ? d : 2 * fs;  // gate, up: one [n, 2fs] output
      x.fused_col = t == LoraTarget::kUp ? fs : 0;
      x.base = SharedExpertTensor(E, down ? kSharedDown : t == LoraTarget::kUp ? kSharedUp : kSharedGate);
    } else if (t == LoraTarget::kRouter) {
      x.in = d, x.out = E, x.fused_width = E, x.base = kRouter;
    } else if (t == LoraTarget::kSharedExpertGate && shared) {
      x.in = d, x.out = 1, x.fused_width = 1, x.base = SharedExpertTensor(E, kSharedExpertGate);
    } else {
      continue;
    }
    Place(*l, x, off, &l->moe_tensors);
  }
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
    if (!IsAttentionTarget(t)) continue;
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
  PlaceMoeTensors(c, peft, any_sparse, &l, &off);
  for (LoraTarget t : peft.target_modules)
    if ((t != LoraTarget::kRouter || any_sparse) &&
        (t != LoraTarget::kSharedExpertGate || (any_sparse && c.moe.has_shared_expert())))
      l.targets.push_back(t);
  l.layer_numel = std::max(dense_end, off);
  return l;
}

const LoraTensor* LoraLayout::Moe(LoraTarget target, bool shared) const {
  for (const LoraTensor& t : moe_tensors)
    if (t.target == target && t.shared == shared) return &t;
  return nullptr;
}

Status CheckLoraTargets(const LlamaConfig& c, const PeftConfig& peft) {
  if (!peft.enabled() || peft.all_linear) return OkStatus();
  const bool sparse = c.is_moe() && c.num_sparse_layers() > 0;
  for (LoraTarget t : peft.target_modules) {
    if (t == LoraTarget::kRouter && !sparse)
      return InvalidArgument(std::string("peft.target_modules: 'gate' is the mixture-of-experts router (mlp.gate), "
                                         "and this ") + c.family_name() + " model has none (PEFT matches nothing)");
    if (t == LoraTarget::kSharedExpertGate && !(sparse && c.moe.has_shared_expert()))
      return InvalidArgument(std::string("peft.target_modules: 'shared_expert_gate' is qwen2_moe's shared "
                                         "expert's gate, and this ") +
                             c.family_name() + " model has none (PEFT matches nothing)");
  }
  return OkStatus();
}

std::vector<LoraTensor> LoraLayout::LayerTensors(int layer) const {
  if (!sparse_layer(layer)) return tensors;
  std::vector<LoraTensor> v;
  for (const LoraTensor& t : tensors)
    if (!IsMlpTarget(t.target)) v.push_back(t);
  v.insert(v.end(), experts.begin(), experts.end());
  v.insert(v.end(), moe_tensors.begin(), moe_tensors.end());
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
    // Never a dense block's: LoraBaseIndex takes LoraTensor::base for these.
    case LoraTarget::kRouter:
    case LoraTarget::kSharedExpertGate: return kGate;
  }
  return kQ;
}

int LoraBaseIndex(const LoraTensor& t) {
  if (t.base >= 0) return t.base;
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
  const std::string suffix = is_b ? ".lora_B.weight" : ".lora_A.weight";
  const std::string pre = "base_model.model.model.layers." + std::to_string(layer);
  if (t.target == LoraTarget::kRouter && t.base >= 0)
    return pre + (layout.mixtral_names ? ".block_sparse_moe.gate" : ".mlp.gate") + suffix;
  if (t.target == LoraTarget::kSharedExpertGate) return pre + ".mlp.shared_expert_gate" + suffix;
  if (t.shared) return pre + ".mlp.shared_expert." + LoraTargetName(t.target) + suffix;
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
