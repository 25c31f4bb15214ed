// Mixture-of-experts pricing for the planner (qwen3_moe, mixtral): total vs
// active parameters, and the routed activation buffers of the engine's
// MoeMlp (shard/model/moe_mlp.cc), one micro-batch at a time.
//
// The experts live in their layer's FSDP unit (ParamLayout::ForLlama), so the
// shards, the per-layer all-gather and the reduce-scatter already count every
// expert's bytes through UnitNumels; what differs from a dense model is:
//
//  * FLOPs: a token runs k of E experts, so the 6N of a step counts the
//    active matmul parameters (router + k experts per sparse layer);
//  * activations: the engine is dropless and sizes every routed buffer for
//    all T·k assignment rows of the micro-batch, in expert order. The bytes do
//    not depend on the routing: however imbalanced, the rows are the same
//    T·k. The worst case for the largest single expert GEMM is T rows (top-k
//    picks k distinct experts, so one expert gets at most every token once),
//    which changes its time, not its memory. The simulator runs that worst
//    case (every token choosing the same k experts).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "shard/spec/llama_config.h"

namespace shard::plan {

// Parameters a token uses: all but the E - k unchosen experts of each sparse
// layer (dense models: NumParams()).
int64_t MoeActiveParams(const LlamaConfig& config);
// The N of 6N FLOPs per token: NumMatmulParams() less the unchosen experts.
int64_t ActiveMatmulParams(const LlamaConfig& config);

// Elements of MoeMlp's buffers for `rows` tokens per micro-batch.
struct MoeActivationElems {
  int64_t saved = 0;    // all `sets` routing + expert activation sets
  int64_t scratch = 0;  // router logits, permuted rows and their gradients
  int64_t routed_rows = 0;  // rows · k
};
MoeActivationElems MoeActivations(const LlamaConfig& config, int64_t rows, int sets);

// The dense MLP width LlamaModel allocates its MLP buffers for: 1 when every
// layer is sparse (mixtral, qwen3_moe's default), else intermediate_size.
int64_t DenseMlpWidth(const LlamaConfig& config);

// "30.53B total, 3.34B active (128 experts, top-8, 48 sparse layers)"; empty for a dense model.
std::string MoeSummary(const LlamaConfig& config);

}  // namespace shard::plan
