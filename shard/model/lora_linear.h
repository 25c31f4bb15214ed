// The LoRA linear: y = x·Wᵀ + s·dropout(x)·Aᵀ·Bᵀ, with A [r, in] and B
// [out, r] (PEFT's lora_A / lora_B) and s = alpha/r (alpha/√r with rsLoRA).
// B·A is never formed: the adapter path is two thin GEMMs through an [n, r]
// intermediate t = dropout(x)·Aᵀ, which the forward saves for the backward
// (n·r floats per adapter, r/in of its input's size) when given a buffer, and
// the backward recomputes otherwise.
// The frozen base's own backward is the model's (dx = dy·W, no dW).
//
// Dropout draws its mask from a seed (Backend::Dropout), so the backward
// regenerates it; each (layer, target) gets its own seed, as PEFT gives each
// wrapped linear its own dropout module.
//
// Thread-safety: LoraScratch is used by one model (one thread) at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/spec/lora_layout.h"

namespace shard {

// An adapter set bound to a LlamaModel (LlamaModel::SetLora). The caller owns
// the buffers (backend memory); the model reads params and adds into grads.
// While a binding is set the base is frozen: the model computes no gradient
// for any base parameter and asks the UnitAccess for no gradient buffer.
struct LoraBinding {
  LoraLayout layout;
  float scale = 1.0f;    // s
  float dropout = 0.0f;  // p, applied in ForwardBackward only (eval is deterministic)
  uint64_t dropout_seed = 0;           // change per micro-batch for fresh masks
  std::vector<const float*> params;    // [num_layers] layer buffers (LoraLayout order)
  std::vector<float*> grads;           // [num_layers]; null entries: no adapter gradients
};

// Per-call scratch, sized for max_rows rows of the widest adapter input.
struct LoraScratch {
  DeviceBuffer x_drop, dx_drop;  // [rows, max_in]; only with dropout
  DeviceBuffer t, g;             // [rows, r]
  static StatusOr<LoraScratch> Create(Backend* backend, const LoraLayout& layout, int64_t max_rows,
                                      bool dropout = true);
};

// The seed of one wrapped linear's dropout mask (expert: the expert whose projection it wraps).
uint64_t LoraDropoutSeed(uint64_t seed, int layer, LoraTarget target, int expert = -1);

struct LoraCall {
  const LoraTensor* tensor = nullptr;
  int r = 0;
  const float* adapter = nullptr;  // the layer's adapter buffer
  float* adapter_grad = nullptr;   // null: no dA, dB
  float scale = 1.0f;
  float dropout = 0.0f;            // 0: none
  uint64_t seed = 0;
  DType compute = DType::kF32;     // GEMM input rounding (GemmArgs::compute)
  float* saved_t = nullptr;        // [n, r]: the forward leaves t here, the backward reads it (null: recompute)
};

// y[:, col .. col+out) (row stride fused_width) += s·dropout(x)·Aᵀ·Bᵀ; x: [n, in].
void LoraForward(Backend* be, const LoraCall& c, const float* x, int64_t n, float* y, LoraScratch& s);

// Given dy (the fused output's gradient, same columns as the forward):
// dx [n, in] += s·dropout'((dy·B)·A); dA += s·(dy·B)ᵀ·dropout(x); dB += s·dyᵀ·(dropout(x)·Aᵀ).
void LoraBackward(Backend* be, const LoraCall& c, const float* x, const float* dy, int64_t n, float* dx,
                  LoraScratch& s);

// Fills one layer's adapter buffer: A per `init` (Kaiming-uniform
// U(±1/√in), PEFT's default; or N(0, 1/r)), B zero — so training starts at
// the base model. A pure function of (seed, layer, element), like InitUnitParams.
void InitLoraLayer(const LoraLayout& layout, LoraInit init, uint64_t seed, int layer, float* out);

// Host: W += s·B·A for every adapter of one layer (block.layer; experts
// included), into that block unit's flat buffer (ParamLayout order) — the
// merged export. Accumulates in double.
void MergeLoraLayer(const LoraLayout& layout, const UnitSpec& block, float scale, const float* adapter, float* unit);

}  // namespace shard
