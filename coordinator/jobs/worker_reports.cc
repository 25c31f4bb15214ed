#include "coordinator/jobs/worker_reports.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "proto/codec/metrics_codec.h"
#include "shard/common/format_number.h"
#include "shard/spec/step_metric_fields.h"

namespace shardd {
namespace {

std::string Num(double v) { return shard::FormatNumber("%g", v); }

// The optional figures (shard/spec/step_metric_fields.h) of a step that has
// their count: finite (a training figure only on a step the loss scaler did
// not skip; an evaluation changes no weights, so nothing skips it), a share
// within 0..1; a sparse model's expert loads as wide as its experts.
shard::Status CheckFigures(const v1::StepMetric& wire, const std::string& at) {
  if (wire.expert_load_size() > 0 && (wire.moe_experts() <= 0 || wire.expert_load_size() % wire.moe_experts() != 0))
    return shard::InvalidArgument(at + "expert_load has " + std::to_string(wire.expert_load_size()) +
                                  " shares, not a multiple of moe_experts " + std::to_string(wire.moe_experts()));
  for (double v : wire.expert_load())
    if (!std::isfinite(v) || v < 0 || v > 1)
      return shard::InvalidArgument(at + "expert_load share " + Num(v) + " is outside 0..1");
  const shard::StepMetrics m = FromStepMetric(wire, 0);
  for (const shard::StepMetricField& f : shard::StepMetricFields()) {
    if (m.*f.present_if <= 0) continue;
    const std::string name(f.name);
    const double v = m.*f.value;
    const bool train = f.split == shard::MetricSplit::kTrain;
    if (!std::isfinite(v) && !(train && m.skipped))
      return shard::InvalidArgument(at + name + " " + Num(v) + " is not finite" +
                                    (train ? " on a step the loss scaler did not skip" : ""));
    if (f.unit == "share" && std::isfinite(v) && (v < 0 || v > 1))
      return shard::InvalidArgument(at + name + " " + Num(v) + " is outside 0..1");
  }
  return shard::OkStatus();
}

}  // namespace

StepReportLimits StepReportLimitsFor(const shard::JobConfig& job) {
  StepReportLimits l;
  l.total_steps = job.train.steps;
  // A preference: batch counts pairs, each a chosen and a rejected row.
  const int64_t rows_per_item = job.preference.enabled() ? 2 : 1;
  int64_t rows = 0;
  if (__builtin_mul_overflow(job.train.global_batch, rows_per_item, &rows) ||
      __builtin_mul_overflow(rows, job.data.seq_len, &l.max_tokens))
    l.max_tokens = std::numeric_limits<int64_t>::max();
  l.max_pairs = job.preference.enabled() ? job.train.global_batch : 0;
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
  if (m.pairs() < 0 || m.pairs() > limits.max_pairs)
    return shard::InvalidArgument(at + "pairs " + std::to_string(m.pairs()) + " out of range 0.." +
                                  std::to_string(limits.max_pairs) +
                                  (limits.max_pairs > 0 ? " (train.global_batch)" : " (the job has no preference:)"));
  if (m.eval_pairs() < 0)
    return shard::InvalidArgument(at + "eval_pairs " + std::to_string(m.eval_pairs()) + " is negative");
  if (m.eval_pairs() > 0 && limits.max_pairs == 0)
    return shard::InvalidArgument(at + "eval_pairs " + std::to_string(m.eval_pairs()) +
                                  " in a job with no preference: (an SFT eval has no pairs)");
  if (m.eval_pairs() > 0 && m.eval_pairs() != m.eval_samples())
    return shard::InvalidArgument(at + "eval_pairs " + std::to_string(m.eval_pairs()) + " but eval_samples " +
                                  std::to_string(m.eval_samples()) + " (a preference: eval counts its pairs)");
  return CheckFigures(m, at);
}


int64_t AddToCounter(int64_t total, int64_t n) {
  total = std::max<int64_t>(total, 0);
  if (n <= 0) return total;
  int64_t sum = 0;
  return __builtin_add_overflow(total, n, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

}  // namespace shardd
