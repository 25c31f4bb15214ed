#include "coordinator/ctl/json_schema.h"

#include <cmath>
#include <cstdio>
#include <ctime>

#include "coordinator/jobs/job_manager.h"
#include "proto/codec/metrics_codec.h"

namespace shardctl {
namespace {

using nlohmann::json;

// JSON has no NaN or infinity (a skipped fp16 step's loss): null.
json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json ProgressObject(const shardd::v1::Progress& p) {
  json o = {{"step", p.step()},
          {"total_steps", p.total_steps()},
          {"loss", Num(p.loss())},
          {"lr", Num(p.lr())},
          {"grad_norm", Num(p.grad_norm())},
          {"loss_scale", Num(p.loss_scale())},
          {"tokens_per_s", Num(p.tokens_per_s())},
          {"step_seconds", Num(p.step_seconds())},
          {"tokens_total", p.tokens_total()},
          {"mfu", Num(p.mfu())},
          {"eta_s", Num(p.eta_s())},
          {"last_committed_step", p.last_committed_step()},
          {"preemptions", p.preemptions()},
          // The last held-out evaluation (eval:), 0 / null before one.
          {"eval_step", p.eval_step()},
          {"eval_loss", p.eval_step() > 0 ? Num(p.eval_loss()) : json(nullptr)},
          {"eval_exact_match",
           p.eval_step() > 0 && p.eval_exact_match() >= 0 ? Num(p.eval_exact_match()) : json(nullptr)},
          // A preference: job's last step (pairs 0: not one; the rewards are then null).
          {"pairs", p.pairs()}};
  // Every training figure of shard/spec/step_metric_fields.h, null when the
  // last step had none (the rewards of an SFT step, a dense model's moe_*).
  for (const shard::StepMetricField& f : shard::StepMetricFields())
    if (f.split == shard::MetricSplit::kTrain) {
      const std::optional<double> v = shardd::ProgressFigure(p, f);
      o[std::string(f.name)] = v ? Num(*v) : json(nullptr);
    }
  return o;
}

}  // namespace

json JobObject(const shardd::v1::JobStatus& js) {
  json workers = json::array();
  for (const auto& w : js.workers())
    workers.push_back({{"rank", w.rank()},
                       {"pid", w.pid()},
                       {"hostname", w.hostname()},
                       {"state", w.state()},
                       {"step", w.step()},
                       {"heartbeat_age_s", Num(w.last_heartbeat_age_s())},
                       {"rss_bytes", w.rss_bytes()},
                       {"step_seconds", Num(w.step_seconds())},
                       {"tokens_per_s", Num(w.tokens_per_s())},
                       {"compute_seconds", Num(w.compute_seconds())},
                       {"straggler", w.straggler()},
                       {"collective", w.collective()},
                       {"launcher_id", w.launcher_id()},
                       {"devices", w.devices()}});
  return {{"id", js.id()},
          {"name", js.name()},
          {"state", shardd::JobStateName(js.state())},
          {"reason", js.reason()},
          {"attempt", js.attempt()},
          {"restarts", js.restarts()},
          {"max_restarts", js.max_restarts()},
          {"world_size", js.world_size()},
          {"attempt_world_size", js.attempt_world_size()},
          {"launcher", js.launcher()},
          {"created_unix_ms", js.created_unix_ms()},
          {"updated_unix_ms", js.updated_unix_ms()},
          {"job_dir", js.job_dir()},
          {"checkpoint_dir", js.checkpoint_dir()},
          {"join_token", js.join_token()},
          {"priority", js.priority()},
          {"placement", js.placement()},
          {"queue_position", js.queue_position()},
          {"demand", js.demand()},
          {"progress", ProgressObject(js.progress())},
          {"stall", {{"text", js.stall().text()},
                     {"attempt", js.stall().attempt()},
                     {"unix_ms", js.stall().unix_ms()},
                     {"trigger", js.stall().trigger()}}},
          {"workers", workers}};
}

json CheckpointObject(const CheckpointRow& c) {
  return {{"step", c.step},   {"state", c.state}, {"path", c.path},
          {"world", c.world}, {"files", c.files}, {"bytes", c.bytes},
          {"committed_unix_ms", c.committed_unix_ms}, {"problem", c.problem}, {"tier", c.tier}};
}

CheckpointRow FromCheckpointInfo(const shardd::v1::CheckpointInfo& c) {
  return {c.step(), c.problem().empty() ? "valid" : "invalid", c.path(), c.world(), c.files(), c.bytes(),
          c.committed_unix_ms(), c.problem(),
          c.checkpoint_tier() == shardd::v1::CHECKPOINT_TIER_MEMORY ? "memory" : "disk"};
}

json JobListObject(const shardd::v1::ListJobsResponse& resp) {
  json jobs = json::array();
  for (const auto& j : resp.jobs()) jobs.push_back(JobObject(j));
  return {{"jobs", jobs}};
}

json CheckpointListObject(const shardd::v1::ListCheckpointsResponse& resp) {
  json list = json::array();
  for (const auto& c : resp.checkpoints()) list.push_back(CheckpointObject(FromCheckpointInfo(c)));
  return {{"checkpoints", list}};
}

json EventObject(const shardd::v1::JobEvent& ev) {
  const std::time_t secs = static_cast<std::time_t>(ev.unix_ms() / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char time[48];
  std::snprintf(time, sizeof(time), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>((ev.unix_ms() % 1000 + 1000) % 1000));
  return {{"seq", ev.seq()},
          {"job_id", ev.job_id()},
          {"unix_ms", ev.unix_ms()},
          {"time", time},
          {"attempt", ev.attempt()},
          {"kind", ev.kind()},
          {"state", shardd::JobStateName(ev.state())},
          {"message", ev.message()}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace shardctl
