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

// train.loss_scale as written in a job file: "auto" (dynamic when the
// precision is fp16, otherwise off), "dynamic", "none", or a positive number
// (a static scale). Parsed once when the job file is read.
enum class LossScaleKind { kAuto, kDynamic, kNone, kStatic };
struct LossScaleSetting {
  LossScaleKind kind = LossScaleKind::kAuto;
  double value = 0;  // kStatic: the scale
  std::string ToString() const;  // the job file's spelling
};
// Errors name neither file nor key: the caller adds them.
StatusOr<LossScaleSetting> ParseLossScaleSetting(const std::string& text);

// The scaler's options for a setting, once the precision is known (`fp16`:
// train.precision resolved to fp16). `window` is train.loss_scale_window,
// checked whatever the mode so a typo is caught before a run switches to fp16.
StatusOr<LossScalerOptions> ResolveLossScale(const LossScaleSetting& setting, bool fp16, int64_t window);

// Both at once: ParseLossScaleSetting then ResolveLossScale.
StatusOr<LossScalerOptions> ParseLossScale(const std::string& text, bool fp16, int64_t window);

}  // namespace shard
