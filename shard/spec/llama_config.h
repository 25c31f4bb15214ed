// The shape of a Llama-family decoder: from a named preset or an HF config.json.
// Knows nothing of ranks, devices or training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shard {

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

struct LlamaConfig {
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

  int head_dim() const { return static_cast<int>(hidden_size / num_heads); }
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

  // HF config.json (LlamaForCausalLM) text.
  std::string ToHfConfigJson() const;
};

// Names accepted by LlamaPreset, for help texts.
std::vector<std::string> LlamaPresetNames();
StatusOr<LlamaConfig> LlamaPreset(const std::string& name);
// Reads an HF config.json (model_type llama, or a compatible decoder).
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
