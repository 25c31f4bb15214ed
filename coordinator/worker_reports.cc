#include "coordinator/worker_reports.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace shardd {
namespace {

std::string Num(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

StepReportLimits StepReportLimitsFor(const shard::JobConfig& job) {
  StepReportLimits l;
  l.total_steps = job.train.steps;
  if (__builtin_mul_overflow(job.train.global_batch, job.data.seq_len, &l.max_tokens))
    l.max_tokens = std::numeric_limits<int64_t>::max();
  return l;
}

shard::Status CheckStepMetric(const v1::StepMetric& m, const StepReportLimits& limits) {
  const std::string at = "step " + std::to_string(m.step()) + ": ";
  if (m.step() < 1 || m.step() > limits.total_steps)
    return shard::InvalidArgument(at + "step out of range 1.." + std::to_string(limits.total_steps) +
                                  " (train.steps)");
  // Only a step the loss scaler skipped may hold inf/NaN: the trainer fails
  // any other (shard/train/trainer.cc), so a non-finite trained step is a
  // corrupt report, never a figure to show.
  if (!m.skipped() && !std::isfinite(m.loss()))
    return shard::InvalidArgument(at + "loss " + Num(m.loss()) + " is not finite on a step the loss scaler did not skip");
  if (!m.skipped() && !std::isfinite(m.grad_norm()))
    return shard::InvalidArgument(at + "grad_norm " + Num(m.grad_norm()) +
                                  " is not finite on a step the loss scaler did not skip");
  const std::string most = std::to_string(limits.max_tokens) + " (train.global_batch x data.seq_len)";
  if (m.tokens() < 0 || m.tokens() > limits.max_tokens)
    return shard::InvalidArgument(at + "tokens " + std::to_string(m.tokens()) + " out of range 0.." + most);
  if (m.positions() < 0 || m.positions() > limits.max_tokens)
    return shard::InvalidArgument(at + "positions " + std::to_string(m.positions()) + " out of range 0.." + most);
  if (!std::isfinite(m.seconds()) || m.seconds() < 0)
    return shard::InvalidArgument(at + "seconds " + Num(m.seconds()) + " is not a finite duration >= 0");
  if (!std::isfinite(m.compute_seconds()) || m.compute_seconds() < 0)
    return shard::InvalidArgument(at + "compute_seconds " + Num(m.compute_seconds()) + " is not a finite duration >= 0");
  if (!std::isfinite(m.lr()) || m.lr() < 0)
    return shard::InvalidArgument(at + "lr " + Num(m.lr()) + " is not a finite rate >= 0");
  if (!std::isfinite(m.loss_scale()) || m.loss_scale() < 0)
    return shard::InvalidArgument(at + "loss_scale " + Num(m.loss_scale()) + " is not a finite scale >= 0");
  if (m.eval_samples() < 0)
    return shard::InvalidArgument(at + "eval_samples " + std::to_string(m.eval_samples()) + " is negative");
  return shard::OkStatus();
}

int64_t AddToCounter(int64_t total, int64_t n) {
  total = std::max<int64_t>(total, 0);
  if (n <= 0) return total;
  int64_t sum = 0;
  return __builtin_add_overflow(total, n, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

}  // namespace shardd
