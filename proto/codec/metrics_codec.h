// The one mapping between a step's metrics (shard::StepMetrics, the record
// the trainer reports and the coordinator stores) and their wire forms: the
// worker's StepMetric (heartbeats, checkpoint reports) and the API's MetricRow
// (GetMetrics, the dashboard). New fields are added here once.
#pragma once

#include "shard/spec/step_metrics.h"
#include "shardd/v1/coordinator.pb.h"
#include "shardd/v1/worker.pb.h"

namespace shardd {

v1::StepMetric ToStepMetric(const shard::StepMetrics& m);
// `attempt`: the attempt whose worker sent it (the wire does not carry it).
shard::StepMetrics FromStepMetric(const v1::StepMetric& m, int attempt);
// tokens_per_s is derived: tokens / seconds (0 when seconds is 0).
v1::MetricRow ToMetricRow(const shard::StepMetrics& m);

}  // namespace shardd
