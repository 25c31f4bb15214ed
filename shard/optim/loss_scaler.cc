#include "shard/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace shard {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  scale_ = options_.mode == LossScaleMode::kOff ? 1.0 : options_.init_scale;
}

bool LossScaler::Update(bool found_nonfinite) {
  switch (options_.mode) {
    case LossScaleMode::kOff:
      return true;
    case LossScaleMode::kStatic:
      return !found_nonfinite;
    case LossScaleMode::kDynamic:
      break;
  }
  if (found_nonfinite) {
    scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    good_steps_ = 0;
    return false;
  }
  if (++good_steps_ >= options_.growth_interval) {
    scale_ = std::min(scale_ * options_.growth_factor, options_.max_scale);
    good_steps_ = 0;
  }
  return true;
}

Status LossScaler::Restore(double scale, int64_t good_steps) {
  if (options_.mode != LossScaleMode::kDynamic) return OkStatus();
  if (!std::isnormal(scale) || scale < options_.min_scale || scale > options_.max_scale)
    return InvalidArgument("saved loss scale " + std::to_string(scale) + " is outside [" +
                           std::to_string(options_.min_scale) + ", " + std::to_string(options_.max_scale) + "]");
  if (good_steps < 0)
    return InvalidArgument("saved loss scale good-step count " + std::to_string(good_steps) + " is negative");
  // A count at or past the window was saved under a longer
  // train.loss_scale_window: the count restarts rather than growing at once.
  if (good_steps >= options_.growth_interval) good_steps = 0;
  scale_ = scale;
  good_steps_ = good_steps;
  return OkStatus();
}

}  // namespace shard
