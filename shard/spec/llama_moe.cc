// The mixture-of-experts part of LlamaConfig (qwen3_moe, mixtral, qwen2_moe): which
// layers are sparse, the parameter count of their experts, and the keys read
// from an HF config.json with transformers' defaults.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "shard/spec/llama_config.h"

namespace shard {

bool LlamaConfig::sparse_layer(int l) const {
  if (!is_moe()) return false;
  if (family == ModelFamily::kMixtral) return true;
  const auto& only = moe.mlp_only_layers;
  if (std::find(only.begin(), only.end(), l) != only.end()) return false;
  return moe.decoder_sparse_step > 0 && (l + 1) % moe.decoder_sparse_step == 0;
}

int LlamaConfig::num_sparse_layers() const {
  int n = 0;
  for (int l = 0; l < num_layers; ++l) n += sparse_layer(l) ? 1 : 0;
  return n;
}

// Checks of the MoE fields (Validate calls it for the MoE families).
Status ValidateMoe(const LlamaConfig& c) {
  auto bad = [](const std::string& m) { return InvalidArgument("model config: " + m); };
  const MoeShape& m = c.moe;
  if (m.num_experts <= 0) return bad(std::string(c.family_name()) + " needs num_experts > 0");
  if (m.num_experts > kMaxExperts)
    return bad("num_experts " + std::to_string(m.num_experts) + " is too large (at most " +
               std::to_string(kMaxExperts) + ")");
  if (m.experts_per_tok <= 0 || m.experts_per_tok > m.num_experts)
    return bad("num_experts_per_tok " + std::to_string(m.experts_per_tok) + " must be in 1.." +
               std::to_string(m.num_experts));
  if (m.expert_intermediate_size <= 0 || m.expert_intermediate_size > kMaxIntermediateSize)
    return bad("moe_intermediate_size " + std::to_string(m.expert_intermediate_size) + " must be in 1.." +
               std::to_string(kMaxIntermediateSize));
  if (m.decoder_sparse_step <= 0) return bad("decoder_sparse_step must be > 0");
  for (int l : m.mlp_only_layers)
    if (l < 0 || l >= c.num_layers)
      return bad("mlp_only_layers entry " + std::to_string(l) + " is not a layer (0.." +
                 std::to_string(c.num_layers - 1) + ")");
  if (!(m.router_aux_loss_coef >= 0)) return bad("router_aux_loss_coef must be >= 0");
  if (c.family == ModelFamily::kQwen2Moe) {
    if (m.shared_expert_intermediate_size <= 0 || m.shared_expert_intermediate_size > kMaxIntermediateSize)
      return bad("shared_expert_intermediate_size " + std::to_string(m.shared_expert_intermediate_size) +
                 " must be in 1.." + std::to_string(kMaxIntermediateSize) + " (qwen2_moe's shared expert)");
  } else if (m.has_shared_expert()) {
    return bad(std::string("shared_expert_intermediate_size is qwen2_moe's; ") + c.family_name() + " has no shared expert");
  }
  return OkStatus();
}

// qwen3_moe / qwen2_moe / mixtral keys, with transformers' defaults
// (Qwen3MoeConfig, Qwen2MoeConfig, MixtralConfig) where a key is absent.
Status ReadMoeShape(const nlohmann::json& j, const std::string& source, LlamaConfig* c) {
  if (c->family != ModelFamily::kQwen3Moe && c->family != ModelFamily::kMixtral && c->family != ModelFamily::kQwen2Moe)
    return OkStatus();
  const bool mixtral = c->family == ModelFamily::kMixtral, qwen2 = c->family == ModelFamily::kQwen2Moe;
  auto where = [&](const char* key) { return source + ": " + key; };
  auto get_int = [&](const char* key, int64_t def, int64_t* out) -> Status {
    *out = def;
    if (!j.contains(key) || j[key].is_null()) return OkStatus();
    if (!j[key].is_number_integer()) return InvalidArgument(where(key) + " must be an integer");
    *out = j[key].get<int64_t>();
    if (*out < 0 || *out > (int64_t{1} << 30)) return InvalidArgument(where(key) + " is out of range");
    return OkStatus();
  };
  auto get_bool = [&](const char* key, bool def, bool* out) -> Status {
    *out = def;
    if (!j.contains(key) || j[key].is_null()) return OkStatus();
    if (!j[key].is_boolean()) return InvalidArgument(where(key) + " must be a boolean");
    *out = j[key].get<bool>();
    return OkStatus();
  };
  MoeShape& m = c->moe;
  int64_t e = 0, k = 0, step = 1;
  RETURN_IF_ERROR(get_int(mixtral ? "num_local_experts" : "num_experts", mixtral ? 8 : qwen2 ? 60 : 128, &e));
  RETURN_IF_ERROR(get_int("num_experts_per_tok", mixtral ? 2 : qwen2 ? 4 : 8, &k));
  m.num_experts = static_cast<int>(e);
  m.experts_per_tok = static_cast<int>(k);
  if (mixtral) {
    m.expert_intermediate_size = c->intermediate_size;
    m.norm_topk_prob = true;
    if (j.contains("router_jitter_noise") && j["router_jitter_noise"].is_number() &&
        j["router_jitter_noise"].get<double>() != 0)
      return Unimplemented(where("router_jitter_noise") + " != 0 is not supported (shardd routes without noise)");
  } else {
    RETURN_IF_ERROR(get_int("moe_intermediate_size", qwen2 ? 1408 : 768, &m.expert_intermediate_size));
    if (qwen2) RETURN_IF_ERROR(get_int("shared_expert_intermediate_size", 5632, &m.shared_expert_intermediate_size));
    RETURN_IF_ERROR(get_int("decoder_sparse_step", 1, &step));
    m.decoder_sparse_step = static_cast<int>(step);
    RETURN_IF_ERROR(get_bool("norm_topk_prob", false, &m.norm_topk_prob));
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
      if (!j["mlp_only_layers"].is_array()) return InvalidArgument(where("mlp_only_layers") + " must be a list");
      for (const auto& v : j["mlp_only_layers"]) {
        if (!v.is_number_integer()) return InvalidArgument(where("mlp_only_layers") + " must list integers");
        m.mlp_only_layers.push_back(v.get<int>());
      }
    }
  }
  RETURN_IF_ERROR(get_bool("output_router_logits", false, &m.output_router_logits));
  if (j.contains("router_aux_loss_coef") && !j["router_aux_loss_coef"].is_null()) {
    if (!j["router_aux_loss_coef"].is_number()) return InvalidArgument(where("router_aux_loss_coef") + " must be a number");
    m.router_aux_loss_coef = j["router_aux_loss_coef"].get<double>();
  }
  return OkStatus();
}

void WriteMoeShape(const LlamaConfig& c, nlohmann::ordered_json* j) {
  if (!c.is_moe()) return;
  const MoeShape& m = c.moe;
  (*j)[c.family == ModelFamily::kMixtral ? "num_local_experts" : "num_experts"] = m.num_experts;
  (*j)["num_experts_per_tok"] = m.experts_per_tok;
  if (c.family == ModelFamily::kQwen3Moe || c.family == ModelFamily::kQwen2Moe) {
    (*j)["moe_intermediate_size"] = m.expert_intermediate_size;
    if (m.has_shared_expert()) (*j)["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size;
    (*j)["decoder_sparse_step"] = m.decoder_sparse_step;
    (*j)["mlp_only_layers"] = m.mlp_only_layers;
    (*j)["norm_topk_prob"] = m.norm_topk_prob;
  }
  (*j)["router_aux_loss_coef"] = m.router_aux_loss_coef;
  (*j)["output_router_logits"] = m.output_router_logits;
}

}  // namespace shard
