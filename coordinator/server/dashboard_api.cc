#include "coordinator/server/dashboard_api.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <iterator>
#include <vector>

#include "coordinator/jobs/job_manager.h"
#include "proto/codec/metrics_codec.h"
#include "shard/spec/step_metric_fields.h"

namespace shardd {
namespace {

using nlohmann::json;

json ProgressJson(const v1::Progress& p) {
  return {{"step", p.step()},
          {"total_steps", p.total_steps()},
          {"loss", p.loss()},
          {"tokens_per_s", p.tokens_per_s()},
          {"eta_s", p.eta_s()},
          {"last_committed_step", p.last_committed_step()},
          {"lr", p.lr()},
          {"grad_norm", p.grad_norm()},
          {"loss_scale", p.loss_scale()},
          {"step_seconds", p.step_seconds()},
          {"tokens_total", p.tokens_total()},
          {"mfu", p.mfu()},
          {"preemptions", p.preemptions()}};
}

json Summary(const v1::JobStatus& j) {
  return {{"id", j.id()},
          {"name", j.name()},
          {"state", JobStateName(j.state())},
          {"attempt", j.attempt()},
          {"restarts", j.restarts()},
          {"max_restarts", j.max_restarts()},
          {"reason", j.reason()},
          {"priority", j.priority()},
          {"placement", j.placement()},
          {"queue_position", j.queue_position()},
          {"world_size", j.world_size()},
          {"launcher", j.launcher()},
          {"created_unix_ms", j.created_unix_ms()},
          {"updated_unix_ms", j.updated_unix_ms()},
          {"progress", ProgressJson(j.progress())}};
}

// A non-finite value (a skipped fp16 step's loss) would break JSON: null.
json Finite(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

json JobListJson(const std::vector<v1::JobStatus>& jobs) {
  std::vector<const v1::JobStatus*> sorted;
  for (const auto& j : jobs) sorted.push_back(&j);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto* a, const auto* b) { return a->created_unix_ms() > b->created_unix_ms(); });
  json list = json::array();
  for (const auto* j : sorted) list.push_back(Summary(*j));
  return {{"jobs", list}};
}

json JobJson(const v1::JobStatus& job, const std::vector<v1::JobEvent>& events,
             const std::vector<v1::CheckpointInfo>& checkpoints) {
  json out = Summary(job);
  out["job_dir"] = job.job_dir();
  out["checkpoint_dir"] = job.checkpoint_dir();
  json workers = json::array();
  for (const auto& w : job.workers())
    workers.push_back({{"rank", w.rank()},
                       {"hostname", w.hostname()},
                       {"pid", w.pid()},
                       {"state", w.state()},
                       {"step", w.step()},
                       {"heartbeat_age_s", w.last_heartbeat_age_s()},
                       {"rss_bytes", w.rss_bytes()},
                       {"step_seconds", w.step_seconds()},
                       {"tokens_per_s", w.tokens_per_s()},
                       {"compute_seconds", w.compute_seconds()},
                       {"straggler", w.straggler()},
                       {"collective", w.collective()},
                       {"devices", w.devices()}});
  out["workers"] = workers;
  out["stall"] = {{"text", job.stall().text()}, {"attempt", job.stall().attempt()}, {"trigger", job.stall().trigger()}};
  json evs = json::array();
  for (const auto& e : events) {
    evs.push_back({{"seq", e.seq()},
                   {"unix_ms", e.unix_ms()},
                   {"attempt", e.attempt()},
                   {"kind", e.kind()},
                   {"state", JobStateName(e.state())},
                   {"message", e.message()}});
    if (e.kind() == "submitted") out["plan"] = e.message();
  }
  out["events"] = evs;
  json ckpts = json::array();
  for (const auto& c : checkpoints)
    ckpts.push_back({{"step", c.step()},
                     {"world", c.world()},
                     {"files", c.files()},
                     {"bytes", c.bytes()},
                     {"path", c.path()},
                     {"committed_unix_ms", c.committed_unix_ms()}});
  out["checkpoints"] = ckpts;
  return out;
}

namespace {

// One series of MetricsJson: a value of the row, counted only where its
// count is > 0 (e.g. no pairs: no rewards).
struct Series {
  std::string key;
  std::function<double(const shard::StepMetrics&)> get;
  int64_t shard::StepMetrics::*rows_with = nullptr;
  bool negative_is_none = false;  // eval_exact_match: -1 = not computed
};

// The series every job has, then the held-out evaluation's loss and exact
// match (rows with eval_samples; a job without eval: keeps its shape), then
// every optional figure of shard/spec/step_metric_fields.h some row has.
std::vector<Series> SeriesOf(const std::vector<shard::StepMetrics>& rows) {
  using M = shard::StepMetrics;
  std::vector<Series> out = {{"loss", [](const M& m) { return m.loss; }},
                             {"lr", [](const M& m) { return m.lr; }},
                             {"grad_norm", [](const M& m) { return m.grad_norm; }},
                             {"tokens_per_s", [](const M& m) { return m.seconds > 0 ? m.tokens / m.seconds : 0; }},
                             {"loss_scale", [](const M& m) { return m.loss_scale; }}};
  auto any = [&](int64_t M::*count) {
    return std::any_of(rows.begin(), rows.end(), [&](const M& m) { return m.*count > 0; });
  };
  if (any(&M::eval_samples)) {
    out.push_back({"eval_loss", [](const M& m) { return m.eval_loss; }, &M::eval_samples});
    out.push_back({"eval_exact_match", [](const M& m) { return m.eval_exact_match; }, &M::eval_samples, true});
  }
  for (const shard::StepMetricField& f : shard::StepMetricFields())
    if (any(f.present_if))
      out.push_back({std::string(f.name), [v = f.value](const M& m) { return m.*v; }, f.present_if});
  return out;
}

// The expert-load heatmap's data: per point, the mean share of each layer's
// experts over the point's rows that carry a load (null where none).
json ExpertLoadJson(const std::vector<shard::StepMetrics>& rows, size_t per) {
  int experts = 0;
  size_t width = 0;
  for (const shard::StepMetrics& m : rows)
    if (!m.expert_load.empty()) experts = m.moe_experts, width = m.expert_load.size();
  if (width == 0) return nullptr;
  json load = json::array();
  for (size_t start = 0; start < rows.size(); start += per) {
    const size_t end = std::min(rows.size(), start + per);
    std::vector<double> sum(width, 0);
    int count = 0;
    for (size_t i = start; i < end; ++i) {
      if (rows[i].expert_load.size() != width) continue;
      for (size_t k = 0; k < width; ++k) sum[k] += rows[i].expert_load[k];
      ++count;
    }
    json point = json::array();
    for (double v : sum) point.push_back(Finite(v / std::max(count, 1)));
    load.push_back(count ? point : json(nullptr));
  }
  return {{"experts", experts}, {"layers", width / std::max(experts, 1)}, {"load", load}};
}

}  // namespace

json MetricFieldsJson() {
  json out = json::array();
  for (const shard::StepMetricField& f : shard::StepMetricFields())
    out.push_back({{"name", f.name},
                   {"display", f.display},
                   {"unit", f.unit},
                   {"meaning", f.meaning},
                   {"split", f.split == shard::MetricSplit::kEval ? "eval" : "train"},
                   {"chart", f.chart},
                   {"series", f.series},
                   {"color", f.color}});
  return out;
}

json MetricsJson(const std::vector<v1::MetricRow>& api_rows, const std::vector<v1::CheckpointInfo>& checkpoints,
                 int max_points) {
  std::vector<shard::StepMetrics> rows;
  rows.reserve(api_rows.size());
  for (const v1::MetricRow& r : api_rows) rows.push_back(FromMetricRow(r));
  const std::vector<Series> fields = SeriesOf(rows);
  max_points = std::max(1, max_points);
  const size_t n = rows.size();
  const size_t per = n == 0 ? 1 : (n + max_points - 1) / max_points;  // rows per point
  std::vector<json> series(fields.size(), json::array());
  json steps = json::array(), restarts = json::array(), commits = json::array();
  for (size_t start = 0; start < n; start += per) {
    const size_t end = std::min(n, start + per);
    std::vector<double> sums(fields.size(), 0);
    std::vector<int> finite(fields.size(), 0);
    for (size_t i = start; i < end; ++i) {
      const shard::StepMetrics& r = rows[i];
      for (size_t k = 0; k < fields.size(); ++k) {
        if (fields[k].rows_with && r.*fields[k].rows_with <= 0) continue;  // e.g. no pairs: no rewards
        const double v = fields[k].get(r);
        if (fields[k].negative_is_none && v < 0) continue;
        if (std::isfinite(v)) sums[k] += v, ++finite[k];
      }
    }
    for (size_t k = 0; k < fields.size(); ++k)
      series[k].push_back(finite[k] ? Finite(sums[k] / finite[k]) : json(nullptr));
    steps.push_back(rows[end - 1].step);
  }
  for (size_t i = 1; i < n; ++i)
    if (rows[i].attempt != rows[i - 1].attempt) restarts.push_back(rows[i].step);
  for (const auto& c : checkpoints) commits.push_back(c.step());
  json out = {{"total_rows", n}, {"steps", steps}};
  for (size_t k = 0; k < fields.size(); ++k) out[fields[k].key] = std::move(series[k]);
  if (json load = ExpertLoadJson(rows, per); !load.is_null()) out["expert_load"] = std::move(load);
  out["restarts"] = restarts;
  out["commits"] = commits;
  return out;
}

}  // namespace shardd
