#include "shard/spec/moe_config.h"

#include <cmath>
#include <string>

#include "shard/common/yaml_config.h"
#include "shard/spec/llama_config.h"

namespace shard {

Status MoeConfig::Validate() const {
  const bool absent = aux_loss_coef == -1;
  if (!absent && !(std::isfinite(aux_loss_coef) && aux_loss_coef >= 0 && aux_loss_coef <= 100))
    return InvalidArgument("moe.aux_loss_coef must be a number in [0, 100] (transformers' default 0.001), got " +
                           std::to_string(aux_loss_coef));
  if (!(std::isfinite(z_loss_coef) && z_loss_coef >= 0 && z_loss_coef <= 100))
    return InvalidArgument("moe.z_loss_coef must be a number in [0, 100] (ST-MoE uses 0.001), got " +
                           std::to_string(z_loss_coef));
  return OkStatus();
}

double MoeConfig::ZLossCoef(const LlamaConfig& model) const { return model.is_moe() ? z_loss_coef : 0.0; }

double MoeConfig::AuxLossCoef(const LlamaConfig& model) const {
  if (!model.is_moe()) return 0;
  if (aux_loss_coef >= 0) return aux_loss_coef;
  return model.moe.output_router_logits ? model.moe.router_aux_loss_coef : 0.0;
}

Status MapMoeSection(YamlMap& root, MoeConfig* moe) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("moe"));
  RETURN_IF_ERROR(m.Get("aux_loss_coef", &moe->aux_loss_coef));
  RETURN_IF_ERROR(m.Get("z_loss_coef", &moe->z_loss_coef));
  return m.Finish();
}

}  // namespace shard
