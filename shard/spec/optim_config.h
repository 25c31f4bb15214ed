// Optimizer and learning-rate schedule settings (the job file's train: section
// minus the batch shape). Semantics follow torch.optim.AdamW.
#pragma once

#include <string>

#include "shard/common/status.h"
#include "shard/spec/enum_names.h"
#include "shard/tensor/dtype.h"

namespace shard {

// train.schedule: the learning rate after warmup.
enum class Schedule { kConstant, kCosine, kLinear };
inline constexpr EnumName<Schedule> kScheduleNames[] = {
    {Schedule::kConstant, "constant"}, {Schedule::kCosine, "cosine"}, {Schedule::kLinear, "linear"}};

// optim.state_dtype: how the master weights and AdamW moments are held.
// bf16 holds them in 2 B each, updated with stochastic rounding
// (shard/optim/bf16_state.h); built for offloaded state only.
inline constexpr EnumName<DType> kStateDTypeNames[] = {{DType::kF32, "fp32"}, {DType::kBF16, "bf16"}};

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
  DType state_dtype = DType::kF32;  // optim.state_dtype (the job file's optim: section)

  Status Validate() const;
};

// Learning rate for 0-based `step` of `total_steps`: linear warmup over
// warmup_steps ((step+1)/warmup * lr), then constant, or cosine/linear decay
// from lr to min_lr_ratio*lr reached at the last step.
double LearningRate(const OptimConfig& c, int64_t step, int64_t total_steps);

}  // namespace shard
