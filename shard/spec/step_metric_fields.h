// The per-step figures that only some steps carry (a preference: step's TRL
// metrics, its held-out pairs' eval/ metrics, a sparse model's routing), each
// declared once in step_metric_fields.cc. Every sink reads this table rather
// than naming the figure: the wire (StepMetric.figures / MetricRow.figures,
// and the older per-figure proto fields found by the same name), the state
// store's metrics columns, `shardctl metrics` (columns and --json), the
// dashboard API and its charts (GET /api/metric_fields), the run report,
// TensorBoard tags, the worker's metrics line and Prometheus gauges.
//
// Adding a figure: a double in shard::StepMetrics, one row below (its column
// is added to older state databases on open: `store_since` = the next state
// schema version), and its producer in shard/train.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "shard/spec/step_metrics.h"

namespace shard {

enum class MetricSplit { kTrain, kEval };

struct StepMetricField {
  std::string_view name;     // snake_case: the wire's and the store's key, the JSON key
  std::string_view display;  // what users know it by: TRL's / HF's name ("rewards/chosen"); the TensorBoard tag
  std::string_view unit;     // "" = a plain number
  std::string_view meaning;  // one line, for help texts and the API
  MetricSplit split;
  std::string_view chart;    // the dashboard's and the report's chart group ("" = no chart)
  std::string_view series;   // this figure's line in that chart
  std::string_view color;    // its colour there
  double StepMetrics::*value;
  // The figure exists at a step when this count is > 0 (pairs, eval_pairs,
  // moe_layers); absent figures are neither sent, shown nor stored.
  int64_t StepMetrics::*present_if;
  bool zero_is_absent;       // hidden also when exactly 0 (orpo's nll under dpo/ipo)
  int store_since;           // the state schema version that added its metrics column
};

// The name of a figure's count (present_if): "pairs", "eval_pairs",
// "moe_layers" (the key it is shown under next to its figures).
std::string_view CountName(int64_t StepMetrics::*count);

// The table, in display order.
std::span<const StepMetricField> StepMetricFields();
// The row named `name`, or nullptr.
const StepMetricField* FindStepMetricField(std::string_view name);
// Whether `f` has a value at the step `m` (its count > 0, and not a hidden 0).
bool FigurePresent(const StepMetrics& m, const StepMetricField& f);
// "rewards/chosen 0.1234 rewards/rejected ..." of the present figures of one
// split, for log lines ("" when none).
std::string FormatFigures(const StepMetrics& m, MetricSplit split);

}  // namespace shard
