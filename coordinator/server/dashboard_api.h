// The JSON the web dashboard polls (GET /api/jobs, /api/jobs/<id>,
// /api/jobs/<id>/metrics). Pure functions over the JobManager's messages, so
// the shapes and the downsampling are tested without a server.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "shardd/v1/coordinator.pb.h"

namespace shardd {

// {"jobs": [{id, name, state, step, total_steps, loss, tokens_per_s, eta_s,
//   restarts, attempt, updated_unix_ms}, ...]} newest first.
nlohmann::json JobListJson(const std::vector<v1::JobStatus>& jobs);

// One job: its status, workers, events (the "submitted" one carries the plan
// it was admitted with) and committed checkpoints.
nlohmann::json JobJson(const v1::JobStatus& job, const std::vector<v1::JobEvent>& events,
                       const std::vector<v1::CheckpointInfo>& checkpoints);

// Per-step series downsampled to at most max_points points: consecutive steps
// fall into equal buckets and each point is the bucket's mean (its last step
// as x), so 100k steps cost the browser 2000 points. Also the steps where a
// new attempt resumed (restarts) and where checkpoints were committed.
// {"total_rows", "steps": [...], "loss": [...], "lr", "grad_norm",
//  "tokens_per_s", "loss_scale", "restarts": [step...], "commits": [step...]};
// then every optional figure of shard/spec/step_metric_fields.h that some row
// carries (a preference: job's TRL metrics and its held-out pairs' eval_
// ones, a sparse model's router figures), keyed by the figure's name and
// averaged over the rows of a point that carry it (null if none); a job
// without them has none of these keys. A sparse model adds "expert_load":
// {"experts", "layers", "load": [per point: layer-major shares, or null]}.

// GET /api/metric_fields: the optional figures' table (name, display, unit,
// meaning, split, chart, series, color), so the dashboard draws its charts
// from it.
nlohmann::json MetricFieldsJson();

nlohmann::json MetricsJson(const std::vector<v1::MetricRow>& rows, const std::vector<v1::CheckpointInfo>& checkpoints,
                           int max_points);

}  // namespace shardd
