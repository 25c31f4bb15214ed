// Loss scaling for reduced-precision gradients (torch.cuda.amp.GradScaler's
// semantics). The loss — in practice the gradient of the loss, the trainer's
// grad_scale — is multiplied by scale() before backward, so small fp16
// gradients do not flush to zero; the optimizer divides it back out. When the
// (all-reduced) gradients hold an inf or a NaN the step's update is skipped
// and a dynamic scale backs off; after `growth_interval` clean steps in a row
// it grows.
//
// Pure state machine: no collectives, no tensors. The caller feeds it one
// verdict per step computed from values every rank shares (an all-reduced
// norm and loss), so every rank's scaler walks the same states.
//
// Thread-safety: none; one training thread owns a LossScaler.
#pragma once

#include <cstdint>
#include <string>

#include "shard/common/status.h"
#include "shard/spec/loss_scale.h"

namespace shard {

class LossScaler {
 public:
  // `options` must have passed Validate().
  explicit LossScaler(const LossScalerOptions& options);

  bool enabled() const { return options_.mode != LossScaleMode::kOff; }
  LossScaleMode mode() const { return options_.mode; }
  // The factor the loss gradient is multiplied by (1 when off).
  double scale() const { return scale_; }
  // Clean steps since the last overflow or growth (dynamic only).
  int64_t good_steps() const { return good_steps_; }
  // A dynamic scale that cannot back off any further.
  bool at_floor() const { return options_.mode == LossScaleMode::kDynamic && scale_ <= options_.min_scale; }

  // Records one step. found_nonfinite: the step's gradients or loss held an
  // inf/NaN. Returns true when the step's update should be applied. Off:
  // always true (the caller decides what a non-finite value means then).
  bool Update(bool found_nonfinite);

  // Restores a checkpointed state (dynamic only; static and off ignore it and
  // keep their configured scale). Refuses a scale outside the bounds or a
  // negative count, naming them; a count saved under a longer window restarts.
  Status Restore(double scale, int64_t good_steps);

 private:
  LossScalerOptions options_;
  double scale_ = 1.0;
  int64_t good_steps_ = 0;
};

}  // namespace shard
