// train.loss_scale and train.loss_scale_window as the job file states them:
// the loss scaler's mode and options (its state machine is
// shard/optim/loss_scaler.h). Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "shard/common/status.h"

namespace shard {

enum class LossScaleMode { kOff, kStatic, kDynamic };
const char* LossScaleModeName(LossScaleMode mode);  // "off" | "static" | "dynamic"

struct LossScalerOptions {
  LossScaleMode mode = LossScaleMode::kOff;
  // static: the scale; dynamic: the first scale.
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
  // Bounds of a dynamic scale. The floor keeps it off 0 and denormals (an
  // overflow even at scale 1 is a diverging run, not a scaling problem); the
  // ceiling keeps a long clean run from growing it to inf in fp32.
  double min_scale = 1.0;
  double max_scale = 16777216.0;  // 2^24
  Status Validate() const;
};

// train.loss_scale as written in a job file: "auto" (dynamic when precision is
// fp16, otherwise off), "dynamic", "none", or a positive number (static).
// `window` is train.loss_scale_window. Errors name neither file nor key: the
// caller adds them.
StatusOr<LossScalerOptions> ParseLossScale(const std::string& spec, const std::string& precision, int64_t window);

}  // namespace shard
