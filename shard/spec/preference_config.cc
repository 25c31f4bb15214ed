#include "shard/spec/preference_config.h"

#include <cmath>
#include <string>

#include "shard/common/format_number.h"
#include "shard/common/yaml_config.h"
#include "shard/spec/yaml_enum.h"

namespace shard {

Status PreferenceConfig::Validate() const {
  if (!enabled()) return OkStatus();
  if (!std::isfinite(beta) || beta <= 0)
    return InvalidArgument("preference.beta must be a positive number, got " + BoundedNumber(beta));
  // 0.5 makes the loss symmetric in chosen and rejected: no gradient at all.
  if (!(label_smoothing >= 0 && label_smoothing < 0.5))
    return InvalidArgument("preference.label_smoothing must be in [0, 0.5), got " + BoundedNumber(label_smoothing));
  if (!std::isfinite(orpo_lambda) || orpo_lambda < 0)
    return InvalidArgument("preference.orpo_lambda must be a number >= 0, got " + BoundedNumber(orpo_lambda));
  return OkStatus();
}

Status MapPreferenceSection(YamlMap& root, PreferenceConfig* p) {
  if (!root.Has("preference")) return OkStatus();
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("preference"));
  if (!m.Has("method")) return InvalidArgument(m.Where("method") + ": required (dpo, ipo or orpo)");
  RETURN_IF_ERROR(GetEnum(m, "method", kPreferenceMethodNames, &p->method));
  RETURN_IF_ERROR(m.Get("beta", &p->beta));
  if (m.Has("label_smoothing") && p->method != PreferenceMethod::kDpo)
    return InvalidArgument(m.Where("label_smoothing") + ": only applies to method dpo (TRL ignores it for " +
                           PreferenceMethodName(p->method) + ")");
  RETURN_IF_ERROR(m.Get("label_smoothing", &p->label_smoothing));
  if (m.Has("orpo_lambda") && p->method != PreferenceMethod::kOrpo)
    return InvalidArgument(m.Where("orpo_lambda") + ": only applies to method orpo");
  RETURN_IF_ERROR(m.Get("orpo_lambda", &p->orpo_lambda));
  RETURN_IF_ERROR(m.Finish());
  Status st = p->Validate();
  if (!st.ok()) return InvalidArgument(root.Where("") + st.message());
  return OkStatus();
}

}  // namespace shard
