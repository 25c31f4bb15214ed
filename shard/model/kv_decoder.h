// Cached autoregressive decoding of one sequence (shardctl generate): every
// layer keeps the rotated keys and the values of the tokens seen so far, so a
// new token runs through each block once and attends to the cache. The work
// per token is the weights plus (position x attention width): linear in the
// generated length, instead of re-running the whole prefix as
// LlamaModel::ForwardLogits would.
//
// The same math as LlamaModel's forward (fp32 GEMMs, the families' qkv
// extras, RoPE, grouped-query attention, SwiGLU or the sparse layers' routed
// experts through the same MoeMlp as training), built from Backend ops; the
// attention softmax over the cache runs on the host (a [heads, new, length]
// score block per layer), which keeps it backend-independent.
//
// Thread-safety: one thread at a time.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/model/unit_weights.h"
#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"
#include "shard/spec/unit_access.h"

namespace shard {

class MoeMlp;
class QkvExtras;

class KvDecoder {
 public:
  // max_len: the most tokens the sequence may reach (prompt + generated);
  // max_chunk: the most tokens one Append may take (the prompt's length).
  static StatusOr<std::unique_ptr<KvDecoder>> Create(const LlamaConfig& config, Backend* backend, int64_t max_len,
                                                     int64_t max_chunk);
  ~KvDecoder();

  // Runs `tokens` (positions length() .. length()+n-1) through the model,
  // appends them to the cache and returns the logits [vocab] after the last one.
  StatusOr<std::vector<float>> Append(std::span<const int32_t> tokens, UnitAccess& access);

  int64_t length() const { return length_; }
  // Attention score entries computed so far (query x cached key pairs, per
  // head and layer): tests count it to show the cost per token is the length.
  int64_t score_entries() const { return score_entries_; }

 private:
  KvDecoder(const LlamaConfig& config, Backend* backend, int64_t max_len, int64_t max_chunk);
  Status Allocate();
  // One block for the n new rows in x_ (in place: x_ becomes the block output).
  Status Block(const UnitWeights& w, int layer, int64_t n);
  // attn_[n, H*hd] = softmax(q k^T / sqrt(hd), causal over the cache) v.
  void Attention(int layer, int64_t n);

  LlamaConfig config_;
  ParamLayout layout_;
  Backend* backend_;
  int64_t max_len_, max_chunk_;
  int64_t length_ = 0;
  int64_t score_entries_ = 0;
  std::unique_ptr<QkvExtras> extras_;
  UnitWeights embed_w_, block_w_, moe_w_, head_w_;  // the unit in use of each kind (UnitAccess::ParamsDType)
  std::unique_ptr<MoeMlp> moe_;  // sparse layers' MLP (qwen3_moe, mixtral), else null
  std::vector<DeviceBuffer> k_cache_, v_cache_;  // per layer [max_len, KV*hd]
  DeviceBuffer x_, xn_, qkv_, attn_, gu_, h_, rstd_, scores_, logits_, rope_table_;
  DeviceBuffer tokens_, positions_;  // int32 [max_chunk]
  std::vector<float> host_scores_;
};

}  // namespace shard
