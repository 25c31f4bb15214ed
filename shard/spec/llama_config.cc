#include "shard/spec/llama_config.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>

#include "shard/common/file_util.h"
#include "shard/common/format_number.h"
#include "shard/common/json_object.h"

namespace shard {

// shard/spec/llama_moe.cc: the MoE fields (qwen3_moe, mixtral, qwen2_moe).
Status ValidateMoe(const LlamaConfig& c);
Status ReadMoeShape(const nlohmann::json& j, const std::string& source, LlamaConfig* c);
void WriteMoeShape(const LlamaConfig& c, nlohmann::ordered_json* j);

Status LlamaConfig::Validate() const {
  auto bad = [](const std::string& m) { return InvalidArgument("model config: " + m); };
  if (vocab_size <= 0) return bad("vocab_size must be > 0");
  if (hidden_size <= 0) return bad("hidden_size must be > 0");
  if (intermediate_size <= 0) return bad("intermediate_size must be > 0");
  if (num_layers <= 0) return bad("num_hidden_layers must be > 0");
  if (num_heads <= 0) return bad("num_attention_heads must be > 0");
  if (num_kv_heads <= 0) return bad("num_key_value_heads must be > 0");
  if (explicit_head_dim < 0) return bad("head_dim must be > 0");
  if (explicit_head_dim == 0 && hidden_size % num_heads != 0)
    return bad("hidden_size " + std::to_string(hidden_size) + " is not divisible by num_attention_heads " +
               std::to_string(num_heads));
  if (num_heads % num_kv_heads != 0)
    return bad("num_attention_heads " + std::to_string(num_heads) +
               " is not a multiple of num_key_value_heads " + std::to_string(num_kv_heads));
  if (head_dim() % 2 != 0) return bad("head_dim " + std::to_string(head_dim()) + " must be even for RoPE");
  if (sliding_window < 0) return bad("sliding_window must be >= 0 (0 = none)");
  if (!(rms_norm_eps > 0)) return bad("rms_norm_eps must be > 0");
  if (!(rope_theta > 0)) return bad("rope_theta must be > 0");
  if (max_position_embeddings <= 0) return bad("max_position_embeddings must be > 0");
  const bool moe_family =
      family == ModelFamily::kQwen3Moe || family == ModelFamily::kMixtral || family == ModelFamily::kQwen2Moe;
  if (moe_family || is_moe()) RETURN_IF_ERROR(ValidateMoe(*this));
  if (!rope_scaling.type.empty() && rope_scaling.type != "llama3")
    return Unimplemented("model config: rope_scaling type '" + rope_scaling.type +
                         "' is not supported (supported: llama3)");
  if (rope_scaling.type == "llama3") {
    // rope.cc divides by factor, low_freq_factor and (high - low): a zero or
    // NaN there trains on NaN frequencies (loss -nan, exit 0).
    const RopeScaling& s = rope_scaling;
    auto pos = [](double v) { return std::isfinite(v) && v > 0; };
    if (!pos(s.factor)) return bad("rope_scaling.factor must be a finite number > 0, got " + BoundedNumber(s.factor));
    if (!pos(s.low_freq_factor))
      return bad("rope_scaling.low_freq_factor must be a finite number > 0, got " + BoundedNumber(s.low_freq_factor));
    if (!pos(s.high_freq_factor) || !(s.high_freq_factor > s.low_freq_factor))
      return bad("rope_scaling.high_freq_factor must be finite and > low_freq_factor (" +
                 BoundedNumber(s.low_freq_factor) + "), got " + BoundedNumber(s.high_freq_factor));
    if (s.original_max_position_embeddings <= 0)
      return bad("rope_scaling.original_max_position_embeddings must be > 0, got " +
                 std::to_string(s.original_max_position_embeddings));
  }
  // Sane bounds, checked before anything sizes a buffer from them: a typo
  // (num_hidden_layers: 10000000) must be an error, not 22 GB of layout tables
  // or a bad_alloc. Each bound is far above any released Llama.
  auto too_large = [&](const char* key, int64_t v, int64_t max) {
    return bad(std::string(key) + " " + std::to_string(v) + " is too large (at most " + std::to_string(max) + ")");
  };
  if (vocab_size > kMaxVocabSize) return too_large("vocab_size", vocab_size, kMaxVocabSize);
  if (hidden_size > kMaxHiddenSize) return too_large("hidden_size", hidden_size, kMaxHiddenSize);
  if (intermediate_size > kMaxIntermediateSize)
    return too_large("intermediate_size", intermediate_size, kMaxIntermediateSize);
  if (num_layers > kMaxLayers) return too_large("num_hidden_layers", num_layers, kMaxLayers);
  if (max_position_embeddings > kMaxPositions)
    return too_large("max_position_embeddings", max_position_embeddings, kMaxPositions);
  const double params = ApproxParams();
  if (params > kMaxParams) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "the model has %.3g parameters (%.3g TB in fp32), more than shardd's bound of %.3g",
                  params, params * 4 / 1e12, kMaxParams);
    return bad(buf);
  }
  return OkStatus();
}

double LlamaConfig::ApproxParams() const {
  const double d = static_cast<double>(hidden_size), hd = head_dim();
  const double q = num_heads * hd, kv = static_cast<double>(num_kv_heads) * hd;
  const double block = 2 * d * q + 2 * d * kv + 2 * d + (qkv_bias() ? q + 2 * kv : 0) + (qk_norm() ? 2 * hd : 0);
  const double dense = 3 * d * static_cast<double>(intermediate_size);
  const double sparse = static_cast<double>(moe.num_experts) * d * (1 + 3 * static_cast<double>(moe.expert_intermediate_size)) +
                        (moe.has_shared_expert() ? d * (1 + 3 * static_cast<double>(moe.shared_expert_intermediate_size)) : 0);
  const int ns = is_moe() ? num_sparse_layers() : 0;
  const double emb = static_cast<double>(vocab_size) * d;
  return emb * (tie_word_embeddings ? 1 : 2) + static_cast<double>(num_layers) * block +
         static_cast<double>(num_layers - ns) * dense + ns * sparse + d;
}

int64_t LlamaConfig::NumParams() const {
  int64_t d = hidden_size, hd = head_dim();
  int64_t attn = d * num_heads * hd + 2 * d * num_kv_heads * hd + num_heads * hd * d;
  int64_t mlp = 3 * d * intermediate_size;
  int64_t extras = (qkv_bias() ? qkv_dim() : 0) + (qk_norm() ? 2 * hd : 0);
  int64_t block = attn + 2 * d + extras;
  // A sparse layer: the router [E, d] and E experts of 3 * d * moe_intermediate_size
  // (qwen2_moe: + the shared expert, 3 * d * fs, and its gate [1, d]).
  const int64_t ns = is_moe() ? num_sparse_layers() : 0;
  const int64_t sparse = int64_t{moe.num_experts} * d * (1 + 3 * moe.expert_intermediate_size) +
                         (moe.has_shared_expert() ? d * (1 + 3 * moe.shared_expert_intermediate_size) : 0);
  int64_t emb = vocab_size * d;
  return emb + num_layers * block + (num_layers - ns) * mlp + ns * sparse + d + (tie_word_embeddings ? 0 : emb);
}

Status LlamaConfig::CheckSequenceLength(int64_t seq_len, const std::string& what) const {
  if (sliding_window <= 0 || seq_len <= sliding_window) return OkStatus();
  return Unimplemented(what + " " + std::to_string(seq_len) + " exceeds the model's sliding_window " +
                       std::to_string(sliding_window) + ": shardd's attention is plain causal, which equals " +
                       family_name() + "'s sliding-window attention only up to the window (use at most " +
                       std::to_string(sliding_window) + " tokens)");
}

int64_t LlamaConfig::NumMatmulParams() const {
  int64_t emb = vocab_size * hidden_size;
  return NumParams() - emb + (tie_word_embeddings ? emb : 0);
}

double LlamaConfig::TrainFlopsPerToken(int64_t seq_len) const {
  return 6.0 * static_cast<double>(NumMatmulParams()) +
         12.0 * num_layers * static_cast<double>(num_heads) * head_dim() * static_cast<double>(seq_len);
}

uint64_t LlamaConfig::ShapeHash() const {
  std::string s = std::to_string(vocab_size) + "," + std::to_string(hidden_size) + "," +
                  std::to_string(intermediate_size) + "," + std::to_string(num_layers) + "," +
                  std::to_string(num_heads) + "," + std::to_string(num_kv_heads) + "," +
                  (tie_word_embeddings ? "tied" : "untied");
  // Llama shapes keep their old hash (existing checkpoints stay compatible);
  // the other families and an explicit head_dim change the tensors, so the hash.
  if (family != ModelFamily::kLlama) s += std::string(",") + family_name();
  if (explicit_head_dim > 0) s += ",hd" + std::to_string(explicit_head_dim);
  if (is_moe()) {  // the experts' shapes and which layers hold them
    s += ",moe" + std::to_string(moe.num_experts) + "x" + std::to_string(moe.expert_intermediate_size) + ",sparse";
    for (int l = 0; l < num_layers; ++l) s += sparse_layer(l) ? "1" : "0";
    if (moe.has_shared_expert()) s += ",shared" + std::to_string(moe.shared_expert_intermediate_size);
  }
  return XXH64(s.data(), s.size(), 0);
}

std::string LlamaConfig::ToHfConfigJson() const {
  static const char* const kArchitectures[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                                "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM",
                                                "Qwen2MoeForCausalLM"};
  static_assert(std::size(kArchitectures) == std::size(kModelFamilyNames));
  nlohmann::ordered_json j;
  j["architectures"] = {kArchitectures[static_cast<int>(family)]};
  j["model_type"] = family_name();
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim();
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling.type.empty()) {
    j["rope_scaling"] = nullptr;
  } else {
    j["rope_scaling"] = {{"rope_type", rope_scaling.type},
                         {"factor", rope_scaling.factor},
                         {"low_freq_factor", rope_scaling.low_freq_factor},
                         {"high_freq_factor", rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  }
  j["max_position_embeddings"] = max_position_embeddings;
  j["tie_word_embeddings"] = tie_word_embeddings;
  WriteMoeShape(*this, &j);
  if (family == ModelFamily::kMistral || family == ModelFamily::kMixtral) j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nullptr;
  if (family == ModelFamily::kQwen2 || family == ModelFamily::kQwen3 || family == ModelFamily::kQwen3Moe ||
      family == ModelFamily::kQwen2Moe) {
    j["use_sliding_window"] = sliding_window > 0;
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nullptr;
    if (sliding_window > 0) j["max_window_layers"] = 0;  // every layer, as CheckSequenceLength assumes
  }
  if (!qkv_bias()) j["attention_bias"] = false;  // Qwen2's (and qwen2_moe's) q/k/v biases are implied
  if (family == ModelFamily::kLlama) j["mlp_bias"] = false;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

namespace {

LlamaConfig Make(int64_t vocab, int64_t d, int64_t ffn, int layers, int heads, int kv, double theta,
                 int64_t max_pos, bool tied, double eps = 1e-5) {
  LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = d;
  c.intermediate_size = ffn;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.rope_theta = theta;
  c.max_position_embeddings = max_pos;
  c.tie_word_embeddings = tied;
  c.rms_norm_eps = eps;
  return c;
}

RopeScaling Llama3Scaling(double factor) {
  RopeScaling s;
  s.type = "llama3";
  s.factor = factor;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  return s;
}

struct Preset {
  const char* name;
  LlamaConfig config;
};

const std::vector<Preset>& Presets() {
  static const std::vector<Preset> presets = [] {
    std::vector<Preset> p;
    // ~0.9M parameters: trains in seconds on a CPU.
    p.push_back({"tiny", Make(512, 128, 352, 4, 4, 2, 10000.0, 2048, false)});
    // The benchmark shape of tests/bench (d=256, 8 heads, 4 KV heads, ffn 688, vocab 4096).
    p.push_back({"bench", Make(4096, 256, 688, 4, 8, 4, 10000.0, 4096, false)});
    // Real shapes from the published HF config.json files.
    p.push_back({"llama2-7b", Make(32000, 4096, 11008, 32, 32, 32, 10000.0, 4096, false)});
    p.push_back({"llama2-13b", Make(32000, 5120, 13824, 40, 40, 40, 10000.0, 4096, false)});
    p.push_back({"llama2-70b", Make(32000, 8192, 28672, 80, 64, 8, 10000.0, 4096, false)});
    p.push_back({"llama3-8b", Make(128256, 4096, 14336, 32, 32, 8, 500000.0, 8192, false)});
    p.push_back({"llama3-70b", Make(128256, 8192, 28672, 80, 64, 8, 500000.0, 8192, false)});
    LlamaConfig l31_8b = Make(128256, 4096, 14336, 32, 32, 8, 500000.0, 131072, false);
    l31_8b.rope_scaling = Llama3Scaling(8.0);
    p.push_back({"llama3.1-8b", l31_8b});
    LlamaConfig l31_70b = Make(128256, 8192, 28672, 80, 64, 8, 500000.0, 131072, false);
    l31_70b.rope_scaling = Llama3Scaling(8.0);
    p.push_back({"llama3.1-70b", l31_70b});
    LlamaConfig l32_1b = Make(128256, 2048, 8192, 16, 32, 8, 500000.0, 131072, true);
    l32_1b.rope_scaling = Llama3Scaling(32.0);
    p.push_back({"llama3.2-1b", l32_1b});
    // Other families, from their published config.json files (parameter counts
    // checked against the published totals in tests/unit/model/model_family_test.cc).
    auto family = [](LlamaConfig c, ModelFamily f, int64_t window = 0, int head_dim = 0) {
      c.family = f;
      c.sliding_window = window;
      c.explicit_head_dim = head_dim * c.num_heads == c.hidden_size ? 0 : head_dim;  // as read from config.json
      return c;
    };
    p.push_back({"mistral-7b", family(Make(32000, 4096, 14336, 32, 32, 8, 10000.0, 32768, false), ModelFamily::kMistral, 4096)});
    p.push_back({"mistral-7b-v0.3", family(Make(32768, 4096, 14336, 32, 32, 8, 1e6, 32768, false), ModelFamily::kMistral)});
    p.push_back({"qwen2.5-0.5b", family(Make(151936, 896, 4864, 24, 14, 2, 1e6, 32768, true, 1e-6), ModelFamily::kQwen2)});
    p.push_back({"qwen2.5-7b", family(Make(152064, 3584, 18944, 28, 28, 4, 1e6, 32768, false, 1e-6), ModelFamily::kQwen2)});
    p.push_back({"qwen2.5-72b", family(Make(152064, 8192, 29568, 80, 64, 8, 1e6, 32768, false, 1e-6), ModelFamily::kQwen2)});
    p.push_back({"qwen3-0.6b", family(Make(151936, 1024, 3072, 28, 16, 8, 1e6, 40960, true, 1e-6), ModelFamily::kQwen3, 0, 128)});
    p.push_back({"qwen3-8b", family(Make(151936, 4096, 12288, 36, 32, 8, 1e6, 40960, false, 1e-6), ModelFamily::kQwen3, 0, 128)});
    p.push_back({"qwen3-32b", family(Make(151936, 5120, 25600, 64, 64, 8, 1e6, 40960, false, 1e-6), ModelFamily::kQwen3, 0, 128)});
    // Tiny variants (the "tiny" shape in each family) for tests and demos; tiny-qwen3
    // has head_dim 48 != 128 / 4 and tiny-mistral a 64-token window.
    p.push_back({"tiny-mistral", family(Make(512, 128, 352, 4, 4, 2, 10000.0, 2048, false), ModelFamily::kMistral, 64)});
    p.push_back({"tiny-qwen2", family(Make(512, 128, 352, 4, 4, 2, 10000.0, 2048, true, 1e-6), ModelFamily::kQwen2)});
    // MoE, from their published config.json files (Qwen3-30B-A3B: 128 experts,
    // top-8, head_dim 128; Mixtral-8x7B: 8 experts, top-2), and tiny variants.
    auto moe = [](LlamaConfig c, int experts, int k, int64_t ffn_expert, bool norm_topk) {
      c.moe.num_experts = experts;
      c.moe.experts_per_tok = k;
      c.moe.expert_intermediate_size = ffn_expert;
      c.moe.norm_topk_prob = norm_topk;
      return c;
    };
    p.push_back({"qwen3-30b-a3b", moe(family(Make(151936, 2048, 6144, 48, 32, 4, 1e6, 40960, false, 1e-6),
                                             ModelFamily::kQwen3Moe, 0, 128), 128, 8, 768, true)});
    p.push_back({"mixtral-8x7b", moe(family(Make(32000, 4096, 14336, 32, 32, 8, 1e6, 32768, false),
                                            ModelFamily::kMixtral), 8, 2, 14336, true)});
    p.push_back({"tiny-qwen3-moe", moe(family(Make(512, 128, 352, 4, 4, 2, 10000.0, 2048, false, 1e-6),
                                              ModelFamily::kQwen3Moe), 8, 2, 96, true)});
    p.push_back({"tiny-mixtral", moe(family(Make(512, 128, 96, 4, 4, 2, 10000.0, 2048, false),
                                            ModelFamily::kMixtral), 4, 2, 96, true)});
    // qwen2_moe: Qwen1.5-MoE-A2.7B (60 experts, top-4, a shared expert of 5632,
    // norm_topk_prob false) and a tiny variant.
    auto shared = [](LlamaConfig c, int64_t fs) {
      c.moe.shared_expert_intermediate_size = fs;
      return c;
    };
    p.push_back({"qwen1.5-moe-a2.7b", shared(moe(family(Make(151936, 2048, 5632, 24, 16, 16, 1e6, 8192, false, 1e-6),
                                                        ModelFamily::kQwen2Moe), 60, 4, 1408, false), 5632)});
    p.push_back({"tiny-qwen2-moe", shared(moe(family(Make(512, 128, 352, 4, 4, 2, 10000.0, 2048, false, 1e-6),
                                                     ModelFamily::kQwen2Moe), 8, 2, 96, false), 192)});
    p.push_back({"tiny-qwen3", family(Make(512, 128, 352, 4, 4, 2, 10000.0, 2048, false, 1e-6), ModelFamily::kQwen3, 0, 48)});
    return p;
  }();
  return presets;
}

}  // namespace

std::vector<std::string> LlamaPresetNames() {
  std::vector<std::string> names;
  for (const auto& p : Presets()) names.push_back(p.name);
  return names;
}

StatusOr<LlamaConfig> LlamaPreset(const std::string& name) {
  for (const auto& p : Presets())
    if (name == p.name) return p.config;
  std::string all;
  for (const auto& n : LlamaPresetNames()) all += (all.empty() ? "" : ", ") + n;
  return InvalidArgument("unknown model preset '" + name + "' (known: " + all + ")");
}

namespace {

// Mistral: sliding_window (null = none). Qwen2/3: sliding_window applies only
// with use_sliding_window true, and then to layers >= max_window_layers.
Status ReadSlidingWindow(const nlohmann::json& j, const std::string& source, LlamaConfig* c) {
  if (c->family == ModelFamily::kLlama || !j.contains("sliding_window") || j["sliding_window"].is_null())
    return OkStatus();
  if (!j["sliding_window"].is_number_integer()) return InvalidArgument(source + ": sliding_window must be an integer or null");
  const int64_t window = j["sliding_window"].get<int64_t>();
  if (c->family != ModelFamily::kMistral && c->family != ModelFamily::kMixtral) {
    if (!j.contains("use_sliding_window") || !j["use_sliding_window"].is_boolean() ||
        !j["use_sliding_window"].get<bool>())
      return OkStatus();
    if (j.contains("max_window_layers") && j["max_window_layers"].is_number_integer() &&
        j["max_window_layers"].get<int64_t>() >= c->num_layers)
      return OkStatus();  // no layer uses the window
  }
  if (window <= 0) return InvalidArgument(source + ": sliding_window must be > 0 or null, got " + std::to_string(window));
  c->sliding_window = window;
  return OkStatus();
}

std::string Where(const std::string& source, const char* key) { return source + ": " + key; }

// model_type (the family), and the options shardd does not model refused.
Status ReadFamily(const nlohmann::json& j, const std::string& source, LlamaConfig* c) {
  if (j.contains("model_type") && !j["model_type"].is_null()) {
    if (!j["model_type"].is_string()) return InvalidArgument(Where(source, "model_type") + " must be a string");
    const std::string mt = j["model_type"];
    if (mt == "gpt_oss")
      return Unimplemented(Where(source, "model_type") +
                           " 'gpt_oss' is not supported yet (missing: its router bias, top-k before the softmax, "
                           "clamped GLU with biases, attention sinks and MXFP4 expert weights)");
    auto family = ParseEnum(kModelFamilyNames, mt);
    if (!family.ok())
      return Unimplemented(Where(source, "model_type") + " '" + mt + "' is not supported (supported: " +
                           EnumChoices(kModelFamilyNames) + ")");
    c->family = *family;
  }
  for (const char* flag : {"attention_bias", "mlp_bias"}) {
    if (j.contains(flag) && j[flag].is_boolean() && j[flag].get<bool>())
      return Unimplemented(Where(source, flag) +
                           " = true is not supported (the only biases shardd models are qwen2's q/k/v)");
  }
  if (j.contains("hidden_act") && j["hidden_act"].is_string() && j["hidden_act"] != "silu")
    return Unimplemented(Where(source, "hidden_act") + " = " + j["hidden_act"].get<std::string>() +
                         " is not supported (expected silu)");
  return OkStatus();
}

// rope_scaling: null, an object of type "default" (none), or a scaling with
// its numbers; a present key of the wrong type is an error.
Status ReadRopeScaling(const nlohmann::json& j, const std::string& source, LlamaConfig* c) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return OkStatus();
  const auto& rs = j["rope_scaling"];
  if (!rs.is_object()) return InvalidArgument(Where(source, "rope_scaling") + " must be an object or null");
  const char* type_key = rs.contains("rope_type") ? "rope_type" : rs.contains("type") ? "type" : nullptr;
  if (type_key && !rs[type_key].is_string())
    return InvalidArgument(Where(source, "rope_scaling") + "." + type_key + " must be a string");
  std::string type = type_key ? rs[type_key].get<std::string>() : "";
  if (type != "default") {
    c->rope_scaling.type = type;
    // A present key of the wrong type is an error, not a silent default.
    auto num = [&](const char* k, double* out) -> Status {
      if (!rs.contains(k) || rs[k].is_null()) return OkStatus();
      if (!rs[k].is_number())
        return InvalidArgument(Where(source, "rope_scaling") + "." + k + " must be a number");
      *out = rs[k].get<double>();
      return OkStatus();
    };
    RETURN_IF_ERROR(num("factor", &c->rope_scaling.factor));
    RETURN_IF_ERROR(num("low_freq_factor", &c->rope_scaling.low_freq_factor));
    RETURN_IF_ERROR(num("high_freq_factor", &c->rope_scaling.high_freq_factor));
    const char* ompe = "original_max_position_embeddings";
    if (rs.contains(ompe) && !rs[ompe].is_null()) {
      if (!rs[ompe].is_number_integer())
        return InvalidArgument(Where(source, "rope_scaling") + "." + ompe + " must be an integer");
      c->rope_scaling.original_max_position_embeddings = rs[ompe].get<int64_t>();
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<LlamaConfig> LlamaConfigFromHfJson(const std::string& text, const std::string& source) {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonObject(text, source));
  auto where = [&](const char* key) { return source + ": " + key; };
  auto get_int = [&](const char* key, int64_t* out, bool required) -> Status {
    if (!j.contains(key) || j[key].is_null()) {
      return required ? InvalidArgument(where(key) + " is missing") : OkStatus();
    }
    if (!j[key].is_number_integer()) return InvalidArgument(where(key) + " must be an integer");
    *out = j[key].get<int64_t>();
    return OkStatus();
  };
  auto get_num = [&](const char* key, double* out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return OkStatus();
    if (!j[key].is_number()) return InvalidArgument(where(key) + " must be a number");
    *out = j[key].get<double>();
    return OkStatus();
  };
  LlamaConfig c;
  RETURN_IF_ERROR(ReadFamily(j, source, &c));
  int64_t layers = 0, heads = 0, kv = -1;
  RETURN_IF_ERROR(get_int("vocab_size", &c.vocab_size, true));
  RETURN_IF_ERROR(get_int("hidden_size", &c.hidden_size, true));
  RETURN_IF_ERROR(get_int("intermediate_size", &c.intermediate_size, true));
  RETURN_IF_ERROR(get_int("num_hidden_layers", &layers, true));
  RETURN_IF_ERROR(get_int("num_attention_heads", &heads, true));
  RETURN_IF_ERROR(get_int("num_key_value_heads", &kv, false));
  RETURN_IF_ERROR(get_int("max_position_embeddings", &c.max_position_embeddings, false));
  RETURN_IF_ERROR(get_num("rms_norm_eps", &c.rms_norm_eps));
  RETURN_IF_ERROR(get_num("rope_theta", &c.rope_theta));
  // Range-check before narrowing to int (10000000000 would wrap).
  for (auto [key, v] : {std::pair<const char*, int64_t>{"num_hidden_layers", layers}, {"num_attention_heads", heads},
                        {"num_key_value_heads", kv}})
    if (v > (int64_t{1} << 30)) return InvalidArgument(where(key) + " " + std::to_string(v) + " is too large");
  c.num_layers = static_cast<int>(layers);
  c.num_heads = static_cast<int>(heads);
  c.num_kv_heads = static_cast<int>(kv < 0 ? heads : kv);
  if (j.contains("tie_word_embeddings")) {
    if (!j["tie_word_embeddings"].is_boolean()) return InvalidArgument(where("tie_word_embeddings") + " must be a boolean");
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    int64_t hd = 0;
    RETURN_IF_ERROR(get_int("head_dim", &hd, false));
    if (hd <= 0 || hd > (int64_t{1} << 16)) return InvalidArgument(where("head_dim") + " " + std::to_string(hd) + " is out of range");
    if (heads <= 0 || hd * heads != c.hidden_size) c.explicit_head_dim = static_cast<int>(hd);
  }
  RETURN_IF_ERROR(ReadSlidingWindow(j, source, &c));
  RETURN_IF_ERROR(ReadMoeShape(j, source, &c));
  RETURN_IF_ERROR(ReadRopeScaling(j, source, &c));
  Status st = c.Validate();
  if (!st.ok()) return st.WithContext(source);
  return c;
}

StatusOr<LlamaConfig> LlamaConfigFromHfDir(const std::string& dir) {
  std::string path = (std::filesystem::path(dir) / "config.json").string();
  auto text = ReadFileToString(path);
  if (!text.ok()) return NotFound("model folder " + dir + " has no readable config.json");
  return LlamaConfigFromHfJson(*text, path);
}

int64_t ResolveLossChunkRows(const LlamaConfig& config, int64_t rows, int64_t loss_chunk_rows) {
  rows = std::max<int64_t>(1, rows);
  if (loss_chunk_rows > 0) return std::min(loss_chunk_rows, rows);
  const int64_t row_bytes = std::max<int64_t>(1, config.vocab_size) * static_cast<int64_t>(sizeof(float));
  return std::clamp<int64_t>(kAutoLogitsBudgetBytes / row_bytes, 1, rows);
}

}  // namespace shard
