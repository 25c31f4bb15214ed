// The /metrics page in the Prometheus text format, following its naming
// conventions: per-job series carry `job_id` (never `job`, which Prometheus
// reserves for the scrape target), a job's state is its own 0/1 family
// shardd_job_state{job_id,state}, counters end in _total, step time and
// checkpoint commit duration are histograms, and per-rank figures come from
// the workers' heartbeats. A pure function, tested alone.
#pragma once

#include <string>
#include <vector>

#include "coordinator/telemetry/telemetry.h"

namespace shardd {

std::string RenderMetrics(const std::vector<JobTelemetry>& jobs, const std::string& version);

}  // namespace shardd
