// The one mapping between a step's metrics (shard::StepMetrics, the record
// the trainer reports and the coordinator stores) and their wire forms: the
// worker's StepMetric (heartbeats, checkpoint reports) and the API's MetricRow
// (GetMetrics, the dashboard). The optional figures are written and read
// generically from shard/spec/step_metric_fields.h.
#pragma once

#include <optional>

#include "shard/spec/step_metric_fields.h"
#include "shard/spec/step_metrics.h"
#include "shardd/v1/coordinator.pb.h"
#include "shardd/v1/job.pb.h"
#include "shardd/v1/worker.pb.h"

namespace shardd {

v1::StepMetric ToStepMetric(const shard::StepMetrics& m);
// `attempt`: the attempt whose worker sent it (the wire does not carry it).
shard::StepMetrics FromStepMetric(const v1::StepMetric& m, int attempt);
// tokens_per_s is derived: tokens / seconds (0 when seconds is 0).
v1::MetricRow ToMetricRow(const shard::StepMetrics& m);
// The other way (shardctl and the report read the API's rows through it);
// tokens_per_s is dropped (it is derived).
shard::StepMetrics FromMetricRow(const v1::MetricRow& r);
// The job's progress shows the last reported step's optional training
// figures (and pairs); those with an older Progress field are set there too.
void PutProgressFigures(const v1::StepMetric& last, v1::Progress* p);
// The figure `f` of a progress: from its figures map, else (a progress an
// older coordinator stored) its own field when pairs > 0; nullopt = absent.
std::optional<double> ProgressFigure(const v1::Progress& p, const shard::StepMetricField& f);

}  // namespace shardd
