// The shape of a Llama-family decoder: from a named preset or an HF config.json.
// Knows nothing of ranks, devices or training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/enum_names.h"

namespace shard {

// The decoder families shardd reads from an HF config.json "model_type". All
// are the Llama block (RMSNorm, RoPE, GQA, SwiGLU); the differences:
//   mistral: optional sliding-window attention (sliding_window);
//   qwen2:   biases on the q, k and v projections (model.layers.N.self_attn.{q,k,v}_proj.bias);
//   qwen3:   per-head RMSNorm of q and k before RoPE (self_attn.{q,k}_norm.weight) and an
//            explicit head_dim that may differ from hidden_size / num_attention_heads.
//   qwen3_moe: qwen3's attention; sparse layers route each token to top-k of E
//            experts (mlp.gate.weight, mlp.experts.{j}.{gate,up,down}_proj.weight),
//            the others a dense MLP (MoeShape);
//   mixtral: mistral's attention; every layer sparse (block_sparse_moe.gate.weight,
//            block_sparse_moe.experts.{j}.w1/w3/w2.weight).
//   qwen2_moe: qwen2's attention (q/k/v biases); sparse layers as qwen3_moe's plus a
//            shared expert on every token scaled by sigmoid(shared_expert_gate(x))
//            (mlp.shared_expert.{gate,up,down}_proj.weight, mlp.shared_expert_gate.weight).
// (Appended in this order: the numbering of the older families stays.)
enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3, kQwen3Moe, kMixtral, kQwen2Moe };
inline constexpr EnumName<ModelFamily> kModelFamilyNames[] = {
    {ModelFamily::kLlama, "llama"},         {ModelFamily::kMistral, "mistral"}, {ModelFamily::kQwen2, "qwen2"},
    {ModelFamily::kQwen3, "qwen3"},         {ModelFamily::kQwen3Moe, "qwen3_moe"},
    {ModelFamily::kMixtral, "mixtral"},     {ModelFamily::kQwen2Moe, "qwen2_moe"}};

// The mixture-of-experts part of a config (num_experts 0: a dense model).
// Routing is transformers': softmax of the router logits in fp32, top-k,
// the k weights renormalised to sum 1 iff norm_topk_prob; dropless.
struct MoeShape {
  int num_experts = 0;                    // E (qwen3_moe/qwen2_moe num_experts, mixtral num_local_experts)
  int experts_per_tok = 0;                // k (num_experts_per_tok)
  int64_t expert_intermediate_size = 0;   // moe_intermediate_size (mixtral: intermediate_size)
  int decoder_sparse_step = 1;            // qwen3_moe, qwen2_moe: layer i sparse iff (i+1) % step == 0 ...
  std::vector<int> mlp_only_layers;       // ... and i is not listed here
  bool norm_topk_prob = true;             // mixtral: always
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;
  // qwen2_moe: the shared expert's SwiGLU width (shared_expert_intermediate_size),
  // run on every token of a sparse layer and scaled by sigmoid(shared_expert_gate(x)); 0: none.
  int64_t shared_expert_intermediate_size = 0;
  bool has_shared_expert() const { return shared_expert_intermediate_size > 0; }
};

// HF "rope_scaling" of type "llama3" (Llama 3.1+); type "" means none.
struct RopeScaling {
  std::string type;  // "" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Sane bounds on a config's sizes (Validate refuses more): each is well above
// any released Llama (405B: 126 layers, d 16384, ffn 53248, vocab 128256).
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 17;
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;
inline constexpr int kMaxLayers = 4096;
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;
inline constexpr double kMaxParams = 1e13;
inline constexpr int kMaxExperts = 4096;

struct LlamaConfig {
  ModelFamily family = ModelFamily::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // d
  int64_t intermediate_size = 0;  // ffn
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // == num_heads without grouped-query attention
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  // HF head_dim when the config gives one that differs from hidden_size /
  // num_heads (Qwen3); 0 = hidden_size / num_heads.
  int explicit_head_dim = 0;
  // Sliding-window attention span (Mistral's sliding_window, Qwen2's when
  // use_sliding_window); 0 = none. shardd's attention kernels are plain causal,
  // which equals sliding-window attention whenever a sequence is no longer than
  // the window, so longer sequences are refused (CheckSequenceLength).
  int64_t sliding_window = 0;
  MoeShape moe;  // qwen3_moe, mixtral, qwen2_moe

  bool is_moe() const { return moe.num_experts > 0; }
  // Layer l routes its tokens to experts (else a dense MLP of intermediate_size).
  bool sparse_layer(int l) const;
  int num_sparse_layers() const;
  int head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : static_cast<int>(hidden_size / num_heads);
  }
  bool qkv_bias() const { return family == ModelFamily::kQwen2 || family == ModelFamily::kQwen2Moe; }
  bool qk_norm() const { return family == ModelFamily::kQwen3 || family == ModelFamily::kQwen3Moe; }
  const char* family_name() const { return EnumToName(kModelFamilyNames, family); }
  // Refuses sequences (training seq_len, prompt + generated tokens) longer than
  // the sliding window, where plain causal attention would differ from the model's.
  Status CheckSequenceLength(int64_t seq_len, const std::string& what) const;
  int64_t qkv_dim() const { return static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim(); }

  // Errors name the field; checks divisibility of heads, even head_dim, etc.
  Status Validate() const;

  // Total parameters (the lm_head counted once when tied).
  int64_t NumParams() const;
  // The same in double: no overflow for any field values (Validate uses it
  // before the int64 arithmetic is known to be safe).
  double ApproxParams() const;
  // Parameters that take part in matmuls (without the input embedding; with the
  // head even when tied): the N of the 6N FLOPs-per-token estimate.
  int64_t NumMatmulParams() const;
  // Training FLOPs per token: 6N + 12 * L * d * T (attention, non-causal count).
  double TrainFlopsPerToken(int64_t seq_len) const;

  // Stable hash of the shape, for checkpoint compatibility checks.
  uint64_t ShapeHash() const;

  // HF config.json text for the family (LlamaForCausalLM, MistralForCausalLM, ...).
  std::string ToHfConfigJson() const;
};

// Names accepted by LlamaPreset, for help texts.
std::vector<std::string> LlamaPresetNames();
StatusOr<LlamaConfig> LlamaPreset(const std::string& name);
// Reads an HF config.json; model_type must be one of kModelFamilyNames (a
// missing model_type reads as llama).
StatusOr<LlamaConfig> LlamaConfigFromHfJson(const std::string& json_text, const std::string& source);
StatusOr<LlamaConfig> LlamaConfigFromHfDir(const std::string& dir);

// Auto chunking's budget for one chunk of fp32 logits.
inline constexpr int64_t kAutoLogitsBudgetBytes = int64_t{256} << 20;

// Rows of fp32 logits the LM head and loss hold at once for `rows` tokens per
// micro-batch: loss_chunk_rows (train.loss_chunk_rows) capped at rows, or when
// it is 0 the most rows whose logits fit kAutoLogitsBudgetBytes (at least 1).
// Pure; the engine allocates by it and the planner prices it.
int64_t ResolveLossChunkRows(const LlamaConfig& config, int64_t rows, int64_t loss_chunk_rows);

}  // namespace shard
