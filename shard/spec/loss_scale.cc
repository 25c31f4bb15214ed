#include "shard/spec/loss_scale.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "shard/common/format_number.h"

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
    return InvalidArgument("loss scale " + BoundedNumber(init_scale) + " must be a positive, finite, normal number");
  if (mode == LossScaleMode::kStatic) return OkStatus();
  if (growth_interval < 1) return InvalidArgument("loss scale window must be >= 1, got " + std::to_string(growth_interval));
  if (!positive(growth_factor) || growth_factor <= 1.0)
    return InvalidArgument("loss scale growth factor must be > 1, got " + BoundedNumber(growth_factor));
  if (!positive(backoff_factor) || backoff_factor >= 1.0)
    return InvalidArgument("loss scale backoff factor must be in (0, 1), got " + BoundedNumber(backoff_factor));
  if (!std::isnormal(min_scale) || min_scale <= 0 || !positive(max_scale) || min_scale > max_scale)
    return InvalidArgument("loss scale bounds [" + BoundedNumber(min_scale) + ", " + BoundedNumber(max_scale) +
                           "] must be positive normal numbers, low <= high");
  if (init_scale < min_scale || init_scale > max_scale)
    return InvalidArgument("initial loss scale " + BoundedNumber(init_scale) + " is outside [" +
                           BoundedNumber(min_scale) + ", " + BoundedNumber(max_scale) + "]");
  return OkStatus();
}

std::string LossScaleSetting::ToString() const {
  switch (kind) {
    case LossScaleKind::kAuto: return "auto";
    case LossScaleKind::kDynamic: return "dynamic";
    case LossScaleKind::kNone: return "none";
    case LossScaleKind::kStatic: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%g", value);
      return buf;
    }
  }
  return "?";
}

StatusOr<LossScaleSetting> ParseLossScaleSetting(const std::string& text) {
  LossScaleSetting s;
  if (text == "auto") return s;
  if (text == "dynamic") {
    s.kind = LossScaleKind::kDynamic;
    return s;
  }
  if (text == "none") {
    s.kind = LossScaleKind::kNone;
    return s;
  }
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v) || !(v > 0) ||
      !std::isnormal(v))
    return InvalidArgument("expected auto, dynamic, none or a positive number, got '" + text + "'");
  s.kind = LossScaleKind::kStatic;
  s.value = v;
  return s;
}

StatusOr<LossScalerOptions> ResolveLossScale(const LossScaleSetting& setting, bool fp16, int64_t window) {
  LossScalerOptions o;
  o.growth_interval = window;
  switch (setting.kind) {
    case LossScaleKind::kAuto: o.mode = fp16 ? LossScaleMode::kDynamic : LossScaleMode::kOff; break;
    case LossScaleKind::kDynamic: o.mode = LossScaleMode::kDynamic; break;
    case LossScaleKind::kNone: o.mode = LossScaleMode::kOff; break;
    case LossScaleKind::kStatic:
      o.mode = LossScaleMode::kStatic;
      o.init_scale = setting.value;
      break;
  }
  if (window < 1) return InvalidArgument("loss_scale_window must be >= 1, got " + std::to_string(window));
  RETURN_IF_ERROR(o.Validate());
  return o;
}

StatusOr<LossScalerOptions> ParseLossScale(const std::string& text, bool fp16, int64_t window) {
  ASSIGN_OR_RETURN(LossScaleSetting s, ParseLossScaleSetting(text));
  return ResolveLossScale(s, fp16, window);
}

}  // namespace shard
