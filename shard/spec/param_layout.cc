#include "shard/spec/param_layout.h"

namespace shard {
namespace {

void Add(UnitSpec* u, std::string name, std::vector<int64_t> shape, bool decay) {
  TensorSpec t;
  t.hf_name = std::move(name);
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t s : t.shape) t.numel *= s;
  t.offset = u->numel;
  t.decay = decay;
  u->numel += t.numel;
  u->tensors.push_back(std::move(t));
}

// A sparse block's router and experts under the family's HF names
// (qwen3_moe: mlp.gate / mlp.experts.j.{gate,up,down}_proj; mixtral:
// block_sparse_moe.gate / block_sparse_moe.experts.j.{w1,w3,w2}); qwen2_moe's
// shared expert and its gate follow (mlp.shared_expert.*, mlp.shared_expert_gate).
void AddExperts(const LlamaConfig& c, const std::string& p, UnitSpec* b) {
  const int64_t d = c.hidden_size, fe = c.moe.expert_intermediate_size;
  const bool mixtral = c.family == ModelFamily::kMixtral;
  const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
  b->sparse = true;
  Add(b, moe + "gate.weight", {c.moe.num_experts, d}, true);  // the router [E, d]
  for (int j = 0; j < c.moe.num_experts; ++j) {
    const std::string e = moe + "experts." + std::to_string(j) + ".";
    Add(b, e + (mixtral ? "w1.weight" : "gate_proj.weight"), {fe, d}, true);
    Add(b, e + (mixtral ? "w3.weight" : "up_proj.weight"), {fe, d}, true);
    Add(b, e + (mixtral ? "w2.weight" : "down_proj.weight"), {d, fe}, true);
  }
  if (c.moe.has_shared_expert()) {  // qwen2_moe (SharedExpertTensor)
    const int64_t fs = c.moe.shared_expert_intermediate_size;
    Add(b, moe + "shared_expert.gate_proj.weight", {fs, d}, true);
    Add(b, moe + "shared_expert.up_proj.weight", {fs, d}, true);
    Add(b, moe + "shared_expert.down_proj.weight", {d, fs}, true);
    Add(b, moe + "shared_expert_gate.weight", {1, d}, true);
  }
}

}  // namespace

BlockExtras ParamLayout::ExtrasOf(const UnitSpec& b) {
  BlockExtras x;
  x.q_bias = b.extras_q_bias;
  x.q_norm = b.extras_q_norm;
  x.k_norm = b.extras_k_norm;
  return x;
}

ParamLayout ParamLayout::ForLlama(const LlamaConfig& c) {
  ParamLayout layout;
  const int64_t d = c.hidden_size, hd = c.head_dim(), f = c.intermediate_size;

  UnitSpec embed;
  embed.kind = UnitKind::kEmbedding;
  embed.name = "embed";
  Add(&embed, "model.embed_tokens.weight", {c.vocab_size, d}, false);
  layout.units.push_back(std::move(embed));

  for (int l = 0; l < c.num_layers; ++l) {
    UnitSpec b;
    b.kind = UnitKind::kBlock;
    b.layer = l;
    b.name = "layers." + std::to_string(l);
    std::string p = "model.layers." + std::to_string(l) + ".";
    Add(&b, p + "input_layernorm.weight", {d}, false);
    Add(&b, p + "self_attn.q_proj.weight", {c.num_heads * hd, d}, true);
    Add(&b, p + "self_attn.k_proj.weight", {c.num_kv_heads * hd, d}, true);
    Add(&b, p + "self_attn.v_proj.weight", {c.num_kv_heads * hd, d}, true);
    Add(&b, p + "self_attn.o_proj.weight", {d, c.num_heads * hd}, true);
    Add(&b, p + "post_attention_layernorm.weight", {d}, false);
    if (c.sparse_layer(l)) {
      AddExperts(c, p, &b);
    } else {
      Add(&b, p + "mlp.gate_proj.weight", {f, d}, true);
      Add(&b, p + "mlp.up_proj.weight", {f, d}, true);
      Add(&b, p + "mlp.down_proj.weight", {d, f}, true);
    }
    if (c.qkv_bias()) {
      b.extras_q_bias = static_cast<int>(b.tensors.size());
      Add(&b, p + "self_attn.q_proj.bias", {c.num_heads * hd}, false);
      Add(&b, p + "self_attn.k_proj.bias", {c.num_kv_heads * hd}, false);
      Add(&b, p + "self_attn.v_proj.bias", {c.num_kv_heads * hd}, false);
    }
    if (c.qk_norm()) {
      b.extras_q_norm = static_cast<int>(b.tensors.size());
      Add(&b, p + "self_attn.q_norm.weight", {hd}, false);
      b.extras_k_norm = static_cast<int>(b.tensors.size());
      Add(&b, p + "self_attn.k_norm.weight", {hd}, false);
    }
    if (!b.sparse) layout.block_extras = ExtrasOf(b);
    layout.units.push_back(std::move(b));
  }

  UnitSpec head;
  head.kind = UnitKind::kHead;
  head.name = "head";
  Add(&head, "model.norm.weight", {d}, false);
  if (!c.tie_word_embeddings) Add(&head, "lm_head.weight", {c.vocab_size, d}, true);
  layout.units.push_back(std::move(head));

  for (const auto& u : layout.units) layout.total_numel += u.numel;
  return layout;
}

bool ParamLayout::Find(const std::string& hf_name, int* unit, int* tensor) const {
  for (int u = 0; u < num_units(); ++u) {
    for (size_t t = 0; t < units[u].tensors.size(); ++t) {
      if (units[u].tensors[t].hf_name == hf_name) {
        *unit = u;
        *tensor = static_cast<int>(t);
        return true;
      }
    }
  }
  return false;
}

}  // namespace shard
