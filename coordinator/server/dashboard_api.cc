#include "coordinator/server/dashboard_api.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

#include "coordinator/jobs/job_manager.h"

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

json MetricsJson(const std::vector<v1::MetricRow>& rows, const std::vector<v1::CheckpointInfo>& checkpoints,
                 int max_points) {
  // The series every job has, then the held-out evaluation's loss and exact
  // match (rows with eval_samples; a job without eval: keeps its shape), then
  // a preference: job's (rows with pairs), then its held-out pairs' (rows with
  // eval_pairs). An evaluated series is null where a point holds no evaluation.
  struct Field {
    const char* key;
    double (v1::MetricRow::*get)() const;
    int64_t (v1::MetricRow::*rows_with)() const = nullptr;  // a row counts only where this is > 0
    bool negative_is_none = false;                          // eval_exact_match: -1 = not computed
  };
  static constexpr Field kBase[] = {{"loss", &v1::MetricRow::loss},
                                    {"lr", &v1::MetricRow::lr},
                                    {"grad_norm", &v1::MetricRow::grad_norm},
                                    {"tokens_per_s", &v1::MetricRow::tokens_per_s},
                                    {"loss_scale", &v1::MetricRow::loss_scale}};
  constexpr auto kEvalSamples = &v1::MetricRow::eval_samples;
  static constexpr Field kEval[] = {{"eval_loss", &v1::MetricRow::eval_loss, kEvalSamples},
                                    {"eval_exact_match", &v1::MetricRow::eval_exact_match, kEvalSamples, true}};
  constexpr auto kPairs = &v1::MetricRow::pairs;
  static constexpr Field kPreference[] = {{"rewards_chosen", &v1::MetricRow::rewards_chosen, kPairs},
                                          {"rewards_rejected", &v1::MetricRow::rewards_rejected, kPairs},
                                          {"rewards_accuracies", &v1::MetricRow::rewards_accuracies, kPairs},
                                          {"rewards_margins", &v1::MetricRow::rewards_margins, kPairs},
                                          {"logps_chosen", &v1::MetricRow::logps_chosen, kPairs},
                                          {"logps_rejected", &v1::MetricRow::logps_rejected, kPairs},
                                          {"nll", &v1::MetricRow::nll, kPairs}};
  constexpr auto kEvalPairs = &v1::MetricRow::eval_pairs;
  static constexpr Field kPairEval[] = {{"eval_rewards_chosen", &v1::MetricRow::eval_rewards_chosen, kEvalPairs},
                                        {"eval_rewards_rejected", &v1::MetricRow::eval_rewards_rejected, kEvalPairs},
                                        {"eval_rewards_accuracies", &v1::MetricRow::eval_rewards_accuracies, kEvalPairs},
                                        {"eval_rewards_margins", &v1::MetricRow::eval_rewards_margins, kEvalPairs},
                                        {"eval_logps_chosen", &v1::MetricRow::eval_logps_chosen, kEvalPairs},
                                        {"eval_logps_rejected", &v1::MetricRow::eval_logps_rejected, kEvalPairs},
                                        {"eval_nll", &v1::MetricRow::eval_nll, kEvalPairs}};
  const bool eval = std::any_of(rows.begin(), rows.end(), [](const v1::MetricRow& r) { return r.eval_samples() > 0; });
  const bool preference = std::any_of(rows.begin(), rows.end(), [](const v1::MetricRow& r) { return r.pairs() > 0; });
  const bool pair_eval =
      std::any_of(rows.begin(), rows.end(), [](const v1::MetricRow& r) { return r.eval_pairs() > 0; });
  std::vector<Field> fields(std::begin(kBase), std::end(kBase));
  if (eval) fields.insert(fields.end(), std::begin(kEval), std::end(kEval));
  if (preference) fields.insert(fields.end(), std::begin(kPreference), std::end(kPreference));
  if (pair_eval) fields.insert(fields.end(), std::begin(kPairEval), std::end(kPairEval));

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
      const v1::MetricRow& r = rows[i];
      for (size_t k = 0; k < fields.size(); ++k) {
        if (fields[k].rows_with && (r.*fields[k].rows_with)() <= 0) continue;  // e.g. no pairs: no rewards
        const double v = (r.*fields[k].get)();
        if (fields[k].negative_is_none && v < 0) continue;
        if (std::isfinite(v)) sums[k] += v, ++finite[k];
      }
    }
    for (size_t k = 0; k < fields.size(); ++k)
      series[k].push_back(finite[k] ? Finite(sums[k] / finite[k]) : json(nullptr));
    steps.push_back(rows[end - 1].step());
  }
  for (size_t i = 1; i < n; ++i)
    if (rows[i].attempt() != rows[i - 1].attempt()) restarts.push_back(rows[i].step());
  for (const auto& c : checkpoints) commits.push_back(c.step());
  json out = {{"total_rows", n}, {"steps", steps}};
  for (size_t k = 0; k < fields.size(); ++k) out[fields[k].key] = std::move(series[k]);
  out["restarts"] = restarts;
  out["commits"] = commits;
  return out;
}

}  // namespace shardd
