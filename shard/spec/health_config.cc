#include "shard/spec/health_config.h"

#include <cmath>
#include <string>

#include "shard/common/format_number.h"
#include "shard/common/yaml_config.h"
#include "shard/spec/yaml_enum.h"

namespace shard {

namespace {
constexpr double kMaxStragglerRatio = 100;
constexpr int kMaxStragglerWindow = 100000;
}  // namespace

Status HealthConfig::Validate() const {
  // At or below 1 every rank slower than the median would be named.
  if (!std::isfinite(straggler_ratio) || straggler_ratio <= 1 || straggler_ratio > kMaxStragglerRatio)
    return InvalidArgument("health.straggler_ratio must be a number in (1, 100] (1.5: a rank with 1.5x the other "
                           "ranks' median compute per step is a straggler), got " + BoundedNumber(straggler_ratio));
  if (straggler_window < 1 || straggler_window > kMaxStragglerWindow)
    return InvalidArgument("health.straggler_window must be 1..100000 steps, got " + std::to_string(straggler_window));
  return OkStatus();
}

Status MapHealthSection(YamlMap& root, HealthConfig* h) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("health"));
  RETURN_IF_ERROR(m.Get("straggler_ratio", &h->straggler_ratio));
  RETURN_IF_ERROR(m.Get("straggler_window", &h->straggler_window));
  RETURN_IF_ERROR(GetEnum(m, "straggler_action", kStragglerActionNames, &h->straggler_action));
  return m.Finish();
}

}  // namespace shard
