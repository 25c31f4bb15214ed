// The job file's moe: section — the auxiliary losses of a mixture-of-experts
// model (qwen3_moe, mixtral; docs/moe.md). Ignored by dense models.
//
//   moe: {aux_loss_coef: 0.001, z_loss_coef: 0}
//
// aux_loss_coef multiplies transformers' load_balancing_loss_func (all sparse
// layers of a micro-batch together, padding excluded), averaged over the
// step's micro-batches. Absent, it is transformers' default: the config's
// router_aux_loss_coef when output_router_logits is true, else 0.
// z_loss_coef multiplies ST-MoE's router z-loss: the mean over the same rows
// (every sparse layer's real tokens) of logsumexp(router logits)^2, averaged
// over the step's micro-batches as the aux loss is. Default 0 (off).
#pragma once

#include "shard/common/status.h"

namespace shard {

class YamlMap;
struct LlamaConfig;

struct MoeConfig {
  double aux_loss_coef = -1;  // < 0: absent (the model config's default)
  double z_loss_coef = 0;
  // Messages start with "moe.<key>" (the caller adds the file).
  Status Validate() const;
  // The coefficient in effect for `model`.
  double AuxLossCoef(const LlamaConfig& model) const;
  double ZLossCoef(const LlamaConfig& model) const;  // 0 for a dense model
};

// Maps the job file's moe: section (absent: the defaults).
Status MapMoeSection(YamlMap& root, MoeConfig* moe);

}  // namespace shard
