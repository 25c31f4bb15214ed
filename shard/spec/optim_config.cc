#include "shard/spec/optim_config.h"

#include <algorithm>
#include <cmath>

namespace shard {

Status OptimConfig::Validate() const {
  auto bad = [](const std::string& m) { return InvalidArgument("train." + m); };
  if (!(lr > 0) || !std::isfinite(lr)) return bad("lr must be a positive number");
  if (min_lr_ratio < 0 || min_lr_ratio > 1) return bad("min_lr_ratio must be in [0, 1]");
  if (warmup_steps < 0) return bad("warmup_steps must be >= 0");
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) return bad("adam_betas must each be in [0, 1)");
  if (!(eps > 0)) return bad("adam_eps must be > 0");
  if (weight_decay < 0) return bad("weight_decay must be >= 0");
  if (grad_clip < 0) return bad("grad_clip must be >= 0 (0 = off)");
  return OkStatus();
}

double LearningRate(const OptimConfig& c, int64_t step, int64_t total_steps) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  if (c.schedule == Schedule::kConstant) return c.lr;
  const double min_lr = c.lr * c.min_lr_ratio;
  const int64_t decay_steps = total_steps - c.warmup_steps - 1;
  if (decay_steps <= 0) return c.lr;
  double progress = std::clamp(static_cast<double>(step - c.warmup_steps) / decay_steps, 0.0, 1.0);
  if (c.schedule == Schedule::kLinear) return c.lr - (c.lr - min_lr) * progress;
  return min_lr + 0.5 * (c.lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace shard
