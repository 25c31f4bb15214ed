#include "shard/spec/loss_scale.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace shard {

const char* LossScaleModeName(LossScaleMode mode) {
  switch (mode) {
    case LossScaleMode::kOff: return "off";
    case LossScaleMode::kStatic: return "static";
    case LossScaleMode::kDynamic: return "dynamic";
  }
  return "?";
}

Status LossScalerOptions::Validate() const {
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  if (mode == LossScaleMode::kOff) return OkStatus();
  if (!positive(init_scale) || !std::isnormal(init_scale))
    return InvalidArgument("loss scale " + std::to_string(init_scale) + " must be a positive, finite, normal number");
  if (mode == LossScaleMode::kStatic) return OkStatus();
  if (growth_interval < 1) return InvalidArgument("loss scale window must be >= 1, got " + std::to_string(growth_interval));
  if (!positive(growth_factor) || growth_factor <= 1.0)
    return InvalidArgument("loss scale growth factor must be > 1, got " + std::to_string(growth_factor));
  if (!positive(backoff_factor) || backoff_factor >= 1.0)
    return InvalidArgument("loss scale backoff factor must be in (0, 1), got " + std::to_string(backoff_factor));
  if (!std::isnormal(min_scale) || min_scale <= 0 || !positive(max_scale) || min_scale > max_scale)
    return InvalidArgument("loss scale bounds [" + std::to_string(min_scale) + ", " + std::to_string(max_scale) +
                           "] must be positive normal numbers, low <= high");
  if (init_scale < min_scale || init_scale > max_scale)
    return InvalidArgument("initial loss scale " + std::to_string(init_scale) + " is outside [" +
                           std::to_string(min_scale) + ", " + std::to_string(max_scale) + "]");
  return OkStatus();
}

StatusOr<LossScalerOptions> ParseLossScale(const std::string& spec, const std::string& precision, int64_t window) {
  LossScalerOptions o;
  o.growth_interval = window;
  if (spec == "auto") {
    o.mode = precision == "fp16" ? LossScaleMode::kDynamic : LossScaleMode::kOff;
  } else if (spec == "dynamic") {
    o.mode = LossScaleMode::kDynamic;
  } else if (spec == "none") {
    o.mode = LossScaleMode::kOff;
  } else {
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(spec.c_str(), &end);
    if (spec.empty() || end != spec.c_str() + spec.size() || errno == ERANGE || !std::isfinite(v) || !(v > 0) ||
        !std::isnormal(v))
      return InvalidArgument("expected auto, dynamic, none or a positive number, got '" + spec + "'");
    o.mode = LossScaleMode::kStatic;
    o.init_scale = v;
  }
  // The window is checked whatever the mode, so a typo is caught before a run
  // switches to fp16 and starts to use it.
  if (window < 1) return InvalidArgument("loss_scale_window must be >= 1, got " + std::to_string(window));
  RETURN_IF_ERROR(o.Validate());
  return o;
}

}  // namespace shard
