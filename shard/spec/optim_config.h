// Optimizer and learning-rate schedule settings (the job file's train: section
// minus the batch shape). Semantics follow torch.optim.AdamW.
#pragma once

#include <string>

#include "shard/common/status.h"
#include "shard/spec/enum_names.h"

namespace shard {

// train.schedule: the learning rate after warmup.
enum class Schedule { kConstant, kCosine, kLinear };
inline constexpr EnumName<Schedule> kScheduleNames[] = {
    {Schedule::kConstant, "constant"}, {Schedule::kCosine, "cosine"}, {Schedule::kLinear, "linear"}};

struct OptimConfig {
  double lr = 3e-4;             // peak learning rate
  double min_lr_ratio = 0.0;    // floor of cosine/linear decay, as a fraction of lr
  int64_t warmup_steps = 0;     // linear warmup from lr/warmup to lr
  Schedule schedule = Schedule::kCosine;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;    // decoupled; applied to matrices only
  bool decay_norms_and_embeddings = false;
  double grad_clip = 1.0;       // max global L2 norm; 0 = off

  Status Validate() const;
};

// Learning rate for 0-based `step` of `total_steps`: linear warmup over
// warmup_steps ((step+1)/warmup * lr), then constant, or cosine/linear decay
// from lr to min_lr_ratio*lr reached at the last step.
double LearningRate(const OptimConfig& c, int64_t step, int64_t total_steps);

}  // namespace shard
