#include "coordinator/server/metrics_page.h"

#include <cmath>
#include <map>
#include <sstream>

#include "coordinator/jobs/job_manager.h"
#include "proto/codec/metrics_codec.h"
#include "shard/spec/step_metric_fields.h"

namespace shardd {
namespace {

// Label values escape backslash, quote and newline.
std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Prometheus spells non-finite samples NaN, +Inf, -Inf.
std::string Num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream o;
  o.precision(10);
  o << v;
  return o.str();
}

void Family(std::ostringstream& o, const std::string& name, const std::string& type, const std::string& help) {
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

std::string JobLabel(const JobTelemetry& t) { return "job_id=\"" + Label(t.status.id()) + "\""; }

void RenderHistogram(std::ostringstream& o, const std::string& name, const std::string& help,
                     const std::vector<JobTelemetry>& jobs, const Histogram JobTelemetry::*h) {
  Family(o, name, "histogram", help);
  for (const JobTelemetry& t : jobs) {
    const Histogram& hist = t.*h;
    const std::string job = JobLabel(t);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < hist.bounds.size(); ++i) {
      cumulative += hist.counts[i];
      o << name << "_bucket{" << job << ",le=\"" << Num(hist.bounds[i]) << "\"} " << cumulative << "\n";
    }
    o << name << "_bucket{" << job << ",le=\"+Inf\"} " << hist.count << "\n";
    o << name << "_sum{" << job << "} " << Num(hist.sum) << "\n";
    o << name << "_count{" << job << "} " << hist.count << "\n";
  }
}

struct PerJob {
  const char* name;
  const char* type;
  const char* help;
  double (*get)(const JobTelemetry&);
  bool (*known)(const JobTelemetry&);  // null: always exported
};

// A figure of the last reported step: known once a step has been reported.
bool HasStep(const JobTelemetry& t) { return t.status.progress().step() > 0; }

const PerJob kPerJob[] = {
    {"shardd_job_step", "gauge", "Optimizer steps done (rank 0's last report).",
     [](const JobTelemetry& t) { return double(t.status.progress().step()); }, nullptr},
    {"shardd_job_total_steps", "gauge", "Steps the job trains for.",
     [](const JobTelemetry& t) { return double(t.status.progress().total_steps()); }, nullptr},
    {"shardd_job_attempt", "gauge", "Current attempt number.",
     [](const JobTelemetry& t) { return double(t.status.attempt()); }, nullptr},
    {"shardd_job_restarts_total", "counter", "Restarts after failures so far (preemptions not counted).",
     [](const JobTelemetry& t) { return double(t.status.restarts()); }, nullptr},
    {"shardd_job_preemptions_total", "counter", "Attempts ended by a preemption.",
     [](const JobTelemetry& t) { return double(t.status.progress().preemptions()); }, nullptr},
    {"shardd_job_tokens_total", "counter", "Target tokens trained on (redone steps after a restart count again).",
     [](const JobTelemetry& t) { return double(t.status.progress().tokens_total()); }, nullptr},
    {"shardd_checkpoints_committed_total", "counter", "Checkpoints committed since this coordinator started.",
     [](const JobTelemetry& t) { return double(t.checkpoints_committed); }, nullptr},
    {"shardd_job_last_committed_step", "gauge", "Newest committed checkpoint step (-1: none).",
     [](const JobTelemetry& t) { return double(t.status.progress().last_committed_step()); }, nullptr},
    {"shardd_job_loss", "gauge", "Loss of the last reported step.",
     [](const JobTelemetry& t) { return t.status.progress().loss(); },
     HasStep},
    {"shardd_job_learning_rate", "gauge", "Learning rate of the last reported step.",
     [](const JobTelemetry& t) { return t.status.progress().lr(); },
     HasStep},
    {"shardd_job_grad_norm", "gauge", "Gradient norm (before clipping) of the last reported step.",
     [](const JobTelemetry& t) { return t.status.progress().grad_norm(); },
     HasStep},
    {"shardd_job_loss_scale", "gauge", "fp16 loss scale of the last reported step (1 = no scaler).",
     [](const JobTelemetry& t) { return t.status.progress().loss_scale(); },
     [](const JobTelemetry& t) { return t.status.progress().loss_scale() > 0; }},
    {"shardd_job_tokens_per_second", "gauge", "Target tokens per second of the last reported step.",
     [](const JobTelemetry& t) { return t.status.progress().tokens_per_s(); },
     HasStep},
    {"shardd_job_mfu_ratio", "gauge", "Model FLOPs utilisation of the last step against the planned GPUs' peak.",
     [](const JobTelemetry& t) { return t.status.progress().mfu(); },
     [](const JobTelemetry& t) { return t.status.progress().mfu() >= 0 && t.status.progress().step() > 0; }},
    {"shardd_job_eval_loss", "gauge", "Mean loss per target token of the last held-out evaluation (eval:).",
     [](const JobTelemetry& t) { return t.status.progress().eval_loss(); },
     [](const JobTelemetry& t) { return t.status.progress().eval_step() > 0; }},
    {"shardd_job_eval_exact_match_ratio", "gauge",
     "Greedy exact match of the last held-out evaluation (eval.exact_match).",
     [](const JobTelemetry& t) { return t.status.progress().eval_exact_match(); },
     [](const JobTelemetry& t) {
       return t.status.progress().eval_step() > 0 && t.status.progress().eval_exact_match() >= 0;
     }},
    {"shardd_job_eta_seconds", "gauge", "Estimated seconds to the last step.",
     [](const JobTelemetry& t) { return t.status.progress().eta_s(); },
     [](const JobTelemetry& t) { return t.status.progress().eta_s() >= 0; }},
};

// One gauge per training figure of shard/spec/step_metric_fields.h
// (shardd_job_<name>), for the jobs whose last step carried it.
void RenderFigures(std::ostringstream& o, const std::vector<JobTelemetry>& jobs) {
  for (const shard::StepMetricField& f : shard::StepMetricFields()) {
    if (f.split != shard::MetricSplit::kTrain) continue;
    const std::string name = "shardd_job_" + std::string(f.name);
    Family(o, name, "gauge", std::string(f.meaning) + " (" + std::string(f.display) + ", the last reported step).");
    for (const JobTelemetry& t : jobs) {
      if (const std::optional<double> v = ProgressFigure(t.status.progress(), f))
        o << name << "{" << JobLabel(t) << "} " << Num(*v) << "\n";
    }
  }
}

const v1::JobState kStates[] = {v1::QUEUED, v1::LAUNCHING, v1::RUNNING, v1::RESTARTING,
                                v1::SUCCEEDED, v1::FAILED, v1::CANCELLED};

void RenderRanks(std::ostringstream& o, const std::vector<JobTelemetry>& jobs) {
  struct PerRank {
    const char* name;
    const char* help;
    double (*get)(const v1::WorkerInfo&);
  };
  const PerRank per_rank[] = {
      {"shardd_worker_heartbeat_age_seconds", "Seconds since a running job's worker last heartbeated.",
       [](const v1::WorkerInfo& w) { return w.last_heartbeat_age_s(); }},
      {"shardd_worker_step", "The step a worker last reported.", [](const v1::WorkerInfo& w) { return double(w.step()); }},
      {"shardd_worker_step_seconds", "A worker's last step wall time.",
       [](const v1::WorkerInfo& w) { return w.step_seconds(); }},
      {"shardd_worker_resident_memory_bytes", "A worker's resident set size at its last heartbeat.",
       [](const v1::WorkerInfo& w) { return double(w.rss_bytes()); }},
      {"shardd_worker_compute_seconds",
       "A worker's mean compute per step (step time minus collective waits) over the last straggler window; 0: none yet.",
       [](const v1::WorkerInfo& w) { return w.compute_seconds(); }},
      {"shardd_worker_straggler", "1 while a worker is named a straggler (health.straggler_ratio), else 0.",
       [](const v1::WorkerInfo& w) { return w.straggler() ? 1.0 : 0.0; }},
  };
  for (const PerRank& g : per_rank) {
    Family(o, g.name, "gauge", g.help);
    for (const JobTelemetry& t : jobs) {
      // An ended job's workers are gone: a growing heartbeat age would only
      // raise false stale-heartbeat alerts.
      if (IsTerminal(t.status.state())) continue;
      for (const v1::WorkerInfo& w : t.status.workers())
        if (w.last_heartbeat_age_s() >= 0)
          o << g.name << "{" << JobLabel(t) << ",rank=\"" << w.rank() << "\"} " << Num(g.get(w)) << "\n";
    }
  }
}

}  // namespace

std::string RenderMetrics(const std::vector<JobTelemetry>& jobs, const std::string& version) {
  std::ostringstream o;
  Family(o, "shardd_build_info", "gauge", "Always 1; the coordinator's version as a label.");
  o << "shardd_build_info{version=\"" << Label(version) << "\"} 1\n";
  std::map<std::string, int> by_state;
  for (v1::JobState s : kStates) by_state[JobStateName(s)] = 0;
  for (const JobTelemetry& t : jobs) ++by_state[JobStateName(t.status.state())];
  Family(o, "shardd_jobs", "gauge", "Jobs exported (finished ones until their grace period ends), by state.");
  for (const auto& [state, n] : by_state) o << "shardd_jobs{state=\"" << state << "\"} " << n << "\n";
  Family(o, "shardd_job_state", "gauge", "1 for the state the job is in, 0 for the others.");
  for (const JobTelemetry& t : jobs)
    for (v1::JobState s : kStates)
      o << "shardd_job_state{" << JobLabel(t) << ",state=\"" << JobStateName(s) << "\"} "
        << (t.status.state() == s ? 1 : 0) << "\n";
  Family(o, "shardd_job_info", "gauge", "Always 1; the job's name and launcher as labels.");
  for (const JobTelemetry& t : jobs)
    o << "shardd_job_info{" << JobLabel(t) << ",name=\"" << Label(t.status.name()) << "\",launcher=\""
      << Label(t.status.launcher()) << "\",world_size=\"" << t.status.world_size() << "\"} 1\n";
  for (const PerJob& g : kPerJob) {
    Family(o, g.name, g.type, g.help);
    for (const JobTelemetry& t : jobs)
      if (!g.known || g.known(t)) o << g.name << "{" << JobLabel(t) << "} " << Num(g.get(t)) << "\n";
  }
  RenderFigures(o, jobs);
  RenderHistogram(o, "shardd_job_step_seconds", "Wall time of each reported step.", jobs,
                  &JobTelemetry::step_seconds);
  RenderHistogram(o, "shardd_checkpoint_commit_seconds",
                  "From a checkpoint step's first rank report to its COMMITTED manifest.", jobs,
                  &JobTelemetry::checkpoint_commit_seconds);
  RenderRanks(o, jobs);
  return o.str();
}

}  // namespace shardd
