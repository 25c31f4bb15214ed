#include "shard/spec/peft_config.h"

#include <algorithm>
#include <cmath>

#include "shard/common/format_number.h"
#include "shard/common/yaml_config.h"
#include "shard/spec/yaml_enum.h"

namespace shard {

const char* LoraTargetModule(LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ:
    case LoraTarget::kK:
    case LoraTarget::kV:
    case LoraTarget::kO: return "self_attn";
    default: return "mlp";
  }
}

bool PeftConfig::targets(LoraTarget t) const {
  return std::find(target_modules.begin(), target_modules.end(), t) != target_modules.end();
}

double PeftConfig::scale() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / r;
}

Status PeftConfig::Validate() const {
  if (!enabled()) return OkStatus();
  if (r < 1 || r > 4096) return InvalidArgument("peft.r must be in [1, 4096], got " + std::to_string(r));
  if (!std::isfinite(alpha) || alpha <= 0)
    return InvalidArgument("peft.alpha must be a positive number, got " + BoundedNumber(alpha));
  if (!(dropout >= 0 && dropout < 1))
    return InvalidArgument("peft.dropout must be in [0, 1), got " + BoundedNumber(dropout));
  if (target_modules.empty()) return InvalidArgument("peft.target_modules must name at least one linear layer");
  if (method == PeftMethod::kQlora) {
    // A power of two keeps blocks aligned with the two-codes-per-byte packing
    // and with every shard boundary the FSDP layout rounds to.
    if (block_size < 16 || block_size > 4096 || (block_size & (block_size - 1)) != 0)
      return InvalidArgument("peft.block_size must be a power of two in [16, 4096], got " +
                             std::to_string(block_size));
  }
  return OkStatus();
}

StatusOr<std::vector<LoraTarget>> ParseLoraTargets(const std::vector<std::string>& names) {
  std::vector<LoraTarget> out;
  if (names.size() == 1 && names[0] == "all-linear") {
    for (const auto& e : kLoraTargetNames) out.push_back(e.value);
    return out;
  }
  if (names.empty()) return InvalidArgument("names no module (give a list of names or \"all-linear\")");
  for (const auto& n : names) {
    auto t = ParseEnum(kLoraTargetNames, n);
    // Mixtral's experts name their projections w1 (gate), w3 (up), w2 (down).
    if (!t.ok() && n == "w1") t = LoraTarget::kGate;
    if (!t.ok() && n == "w3") t = LoraTarget::kUp;
    if (!t.ok() && n == "w2") t = LoraTarget::kDown;
    if (!t.ok())
      return InvalidArgument("'" + n + "' names nothing in the model (a Llama block has: " +
                             EnumChoices(kLoraTargetNames) + "; mixtral's experts: w1, w3, w2; or \"all-linear\")");
    if (std::find(out.begin(), out.end(), *t) != out.end())
      return InvalidArgument("'" + n + "' is listed twice");
    out.push_back(*t);
  }
  // Storage order, whatever order the file lists them in.
  std::sort(out.begin(), out.end());
  return out;
}


Status MapPeftSection(YamlMap& root, PeftConfig* p) {
  if (!root.Has("peft")) return OkStatus();
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("peft"));
  if (!m.Has("method")) return InvalidArgument(m.Where("method") + ": required (lora or qlora)");
  RETURN_IF_ERROR(GetEnum(m, "method", kPeftMethodNames, &p->method));
  RETURN_IF_ERROR(m.Get("r", &p->r));
  RETURN_IF_ERROR(m.Get("alpha", &p->alpha));
  RETURN_IF_ERROR(m.Get("dropout", &p->dropout));
  if (m.Has("target_modules")) {
    std::vector<std::string> names;
    if (m.node()["target_modules"].IsScalar()) {
      std::string one;
      RETURN_IF_ERROR(m.Get("target_modules", &one));
      names.push_back(one);
    } else {
      RETURN_IF_ERROR(m.Get("target_modules", &names));
    }
    auto t = ParseLoraTargets(names);
    if (!t.ok()) return InvalidArgument(m.Where("target_modules") + ": " + t.status().message());
    p->target_modules = *t;
    p->all_linear = names.size() == 1 && names[0] == "all-linear";
  }
  RETURN_IF_ERROR(m.Get("use_rslora", &p->use_rslora));
  RETURN_IF_ERROR(GetEnum(m, "init", kLoraInitNames, &p->init));
  RETURN_IF_ERROR(m.Get("from_adapter", &p->from_adapter));
  for (const char* key : {"double_quant", "block_size"})
    if (m.Has(key) && p->method != PeftMethod::kQlora)
      return InvalidArgument(m.Where(key) + ": only applies to method qlora (the NF4 base)");
  RETURN_IF_ERROR(m.Get("double_quant", &p->double_quant));
  RETURN_IF_ERROR(m.Get("block_size", &p->block_size));
  RETURN_IF_ERROR(m.Finish());
  Status st = p->Validate();
  if (!st.ok()) return InvalidArgument(root.Where("") + st.message());
  return OkStatus();
}

}  // namespace shard
