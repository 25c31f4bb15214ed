// Where every parameter lives: the model is cut into FSDP units (the embedding,
// each decoder block, the final norm + LM head); each unit's tensors are packed
// back to back into one flat fp32 buffer in a fixed order. Pure arithmetic on a
// LlamaConfig, shared by the model (which reads weights at these offsets), the
// FSDP runtime (which shards the flat buffers) and HF import/export (which maps
// HF tensor names onto them).
//
// Order inside a block matters: q,k,v are adjacent so one GEMM computes the
// fused qkv projection; gate,up are adjacent for one fused gate/up GEMM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/spec/llama_config.h"

namespace shard {

enum class UnitKind { kEmbedding, kBlock, kHead };

struct TensorSpec {
  std::string hf_name;         // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // HF shape ([out, in] for linear weights)
  int64_t offset = 0;          // element offset inside the unit's flat buffer
  int64_t numel = 0;
  bool decay = false;          // AdamW weight decay applies (matrices, not norms/embeddings)
};

struct UnitSpec {
  UnitKind kind = UnitKind::kBlock;
  int layer = -1;          // block index, -1 for embedding/head
  std::string name;        // "embed", "layers.3", "head"
  std::vector<TensorSpec> tensors;
  int64_t numel = 0;       // sum of tensor sizes (unpadded)
  bool sparse = false;     // a block whose MLP is a mixture of experts
  int extras_q_bias = -1, extras_q_norm = -1, extras_k_norm = -1;  // this block's BlockExtras
};

// Tensor indices inside a block unit, in storage order. The family's extra
// tensors follow kDown (their indices are ParamLayout::block_extras): qwen2's
// q, k, v biases (adjacent, so they form one qkv bias vector), qwen3's q_norm
// and k_norm ([head_dim] each).
enum BlockTensor { kInputNorm = 0, kQ, kK, kV, kO, kPostNorm, kGate, kUp, kDown, kNumBlockTensors };
// A sparse block (LlamaConfig::sparse_layer) has the attention tensors
// (kInputNorm..kPostNorm), then the router [E, d] at kRouter, then per expert
// j its gate, up ([fe, d] each, adjacent: one fused GEMM) and down ([d, fe]),
// then the family's extras.
inline constexpr int kRouter = kGate;
enum ExpertProj { kExpertGate = 0, kExpertUp = 1, kExpertDown = 2 };
inline int ExpertTensor(int expert, ExpertProj p) { return kRouter + 1 + 3 * expert + static_cast<int>(p); }
// qwen2_moe: after the E experts, the shared expert's gate, up ([fs, d],
// adjacent: one fused GEMM), down ([d, fs]) and its sigmoid gate [1, d].
enum SharedProj { kSharedGate = 0, kSharedUp = 1, kSharedDown = 2, kSharedExpertGate = 3 };
inline int SharedExpertTensor(int num_experts, SharedProj p) { return ExpertTensor(num_experts, kExpertGate) + static_cast<int>(p); }
struct BlockExtras {
  int q_bias = -1;  // then k_bias = q_bias + 1, v_bias = q_bias + 2
  int q_norm = -1;
  int k_norm = -1;
};
// Tensor indices inside the head unit (kLmHead absent when embeddings are tied).
enum HeadTensor { kFinalNorm = 0, kLmHead = 1 };

struct ParamLayout {
  std::vector<UnitSpec> units;  // [embed, layers.0 .. layers.L-1, head]
  int64_t total_numel = 0;
  // The extras' indices in the dense blocks (sparse blocks: UnitSpec's own,
  // ExtrasOf); every block of a dense model has the same.
  BlockExtras block_extras;
  static BlockExtras ExtrasOf(const UnitSpec& block);

  static ParamLayout ForLlama(const LlamaConfig& config);

  int num_units() const { return static_cast<int>(units.size()); }
  static constexpr int kEmbedUnit = 0;
  int block_unit(int layer) const { return 1 + layer; }
  int head_unit() const { return num_units() - 1; }

  // Finds a tensor by HF name; returns false when the model has no such tensor.
  bool Find(const std::string& hf_name, int* unit, int* tensor) const;
};

}  // namespace shard
