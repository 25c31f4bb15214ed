// The family-specific steps around the fused qkv projection of a block, shared
// by training (LlamaModel) and cached decoding (KvDecoder):
//   qwen2: qkv += [q_bias | k_bias | v_bias] on every row;
//   qwen3: each q head and each k head is RMS-normalised over head_dim with the
//          q_norm / k_norm weights (before RoPE, as in HF's Qwen3Attention).
// Llama and Mistral have neither, and every call is a no-op for them.
//
// Only Backend ops are used (GEMMs with a ones vector for the bias and its
// gradient, Copy2D to move a head group out of the fused rows and back), so the
// CPU and CUDA backends both run it. Thread-safety: one thread at a time.
#pragma once

#include <memory>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/model/unit_weights.h"
#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"

namespace shard {

class QkvExtras {
 public:
  // `sets` saved-activation sets (one per layer, or one with activation
  // checkpointing) of up to max_rows rows each.
  static StatusOr<std::unique_ptr<QkvExtras>> Create(const LlamaConfig& config, const ParamLayout& layout,
                                                     Backend* backend, int64_t max_rows, int sets);

  bool active() const { return config_.qkv_bias() || config_.qk_norm(); }

  // qkv [n, qkv_dim] right after the projection; w: the block unit's weights.
  // Saves what Backward needs in activation set `set`.
  void Forward(const UnitWeights& w, int set, int64_t n, float* qkv);
  // dqkv: gradient of Forward's output (after the inverse RoPE); overwritten
  // with the gradient of its input. dw accumulates the bias / norm gradients.
  // dw null: a frozen base (LoRA): the gradient still flows through the q/k
  // norms into dqkv, their weight gradients go to a private sink, and the
  // biases get none.
  void Backward(const UnitWeights& w, float* dw, int set, int64_t n, float* dqkv);

 private:
  QkvExtras(const LlamaConfig& config, Backend* backend) : config_(config), backend_(backend) {}
  // Points the bias / norm indices and offsets at this block's (MoE models:
  // sparse and dense blocks hold them at different places).
  void Resolve(const UnitSpec& spec);

  struct Group {  // one head group (q or k) of the fused row
    int64_t col = 0;          // first column in the qkv row
    int64_t heads = 0;
    int norm_tensor = -1;     // its norm weight [head_dim]: tensor index in the block unit
    int64_t norm_offset = 0;  // and its offset there (for the gradient)
    int64_t saved_rows = 0;   // first row of its pre-norm copy / rstd in raw_ / rstd_ (in heads)
  };

  LlamaConfig config_;
  Backend* backend_;
  int64_t max_rows_ = 0;
  int64_t bias_offset_ = -1;  // q_bias in the block unit (k, v biases follow)
  int bias_tensor_ = -1;      // its tensor index
  std::vector<Group> groups_;  // q, k when qk_norm
  DeviceBuffer ones_;                  // [max_rows] of 1.0 (bias add and its column sum)
  std::vector<DeviceBuffer> raw_;      // per set: pre-norm q then k heads [n*(H+KV)*hd]
  std::vector<DeviceBuffer> rstd_;     // per set: [n*(H+KV)]
  DeviceBuffer scratch_a_, scratch_b_;  // [max_rows * H*hd] each
  DeviceBuffer norm_sink_;              // [head_dim]: a frozen base's norm-weight gradients (never read)
};

}  // namespace shard
