#include "proto/codec/metrics_codec.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "shard/spec/step_metric_fields.h"

namespace shardd {
namespace {

namespace pb = google::protobuf;

// A figure's own proto field, found by the table's name; nullptr when it has
// none. Only the served messages (MetricRow, JobProgress) keep the preference
// figures' own fields, for older shardctl clients; the worker's StepMetric
// carries every figure in its map alone (protocol 3).
const pb::FieldDescriptor* OwnField(const pb::Message& msg, const shard::StepMetricField& f) {
  const pb::FieldDescriptor* d = msg.GetDescriptor()->FindFieldByName(std::string(f.name));
  return d != nullptr && d->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE && !d->is_repeated() ? d : nullptr;
}

// Writes the present figures into msg.figures and their own fields. A step
// without a figure's count (an SFT step's pairs) leaves both unset, as before.
template <class Msg>
void PutFigures(const shard::StepMetrics& m, Msg* msg, bool train_only = false) {
  for (const shard::StepMetricField& f : shard::StepMetricFields()) {
    if (m.*f.present_if <= 0 || (train_only && f.split != shard::MetricSplit::kTrain)) continue;
    (*msg->mutable_figures())[std::string(f.name)] = m.*f.value;
    if (const pb::FieldDescriptor* d = OwnField(*msg, f)) msg->GetReflection()->SetDouble(msg, d, m.*f.value);
  }
}

// The figures whose count is set: from msg.figures, else from their own field.
template <class Msg>
void GetFigures(const Msg& msg, shard::StepMetrics* m) {
  for (const shard::StepMetricField& f : shard::StepMetricFields()) {
    if (m->*f.present_if <= 0) continue;
    auto it = msg.figures().find(std::string(f.name));
    if (it != msg.figures().end())
      m->*f.value = it->second;
    else if (const pb::FieldDescriptor* d = OwnField(msg, f))
      m->*f.value = msg.GetReflection()->GetDouble(msg, d);
  }
}

template <class Msg>
void PutExpertLoad(const shard::StepMetrics& m, Msg* msg) {
  if (m.expert_load.empty()) return;
  msg->set_moe_experts(m.moe_experts);
  msg->mutable_expert_load()->Assign(m.expert_load.begin(), m.expert_load.end());
}

// The fields a StepMetric (worker → coordinator) and a MetricRow (the stored
// row, as served) both carry, set alike.
template <typename Msg>
void PutShared(const shard::StepMetrics& m, Msg* msg) {
  msg->set_step(m.step);
  msg->set_loss(m.loss);
  msg->set_lr(m.lr);
  msg->set_grad_norm(m.grad_norm);
  msg->set_tokens(m.tokens);
  msg->set_seconds(m.seconds);
  msg->set_skipped(m.skipped);
  msg->set_loss_scale(m.loss_scale);
  msg->set_eval_samples(m.eval_samples);
  msg->set_eval_loss(m.eval_loss);
  msg->set_eval_exact_match(m.eval_exact_match);
  if (m.pairs > 0) msg->set_pairs(m.pairs);  // an SFT step leaves them unset: its message is as before
  if (m.eval_pairs > 0) msg->set_eval_pairs(m.eval_pairs);
  PutExpertLoad(m, msg);
  PutFigures(m, msg);
}

// PutShared's reverse, the expert load included (GetFigures comes after the
// counts it depends on).
template <typename Msg>
void GetShared(const Msg& msg, shard::StepMetrics* m) {
  m->step = msg.step();
  m->loss = msg.loss();
  m->lr = msg.lr();
  m->grad_norm = msg.grad_norm();
  m->tokens = msg.tokens();
  m->seconds = msg.seconds();
  m->skipped = msg.skipped();
  m->loss_scale = msg.loss_scale();
  m->eval_samples = msg.eval_samples();
  m->eval_loss = msg.eval_loss();
  m->moe_experts = msg.moe_experts();
  m->expert_load.assign(msg.expert_load().begin(), msg.expert_load().end());
  m->moe_layers = m->moe_experts > 0 ? static_cast<int64_t>(m->expert_load.size()) / m->moe_experts : 0;
}

}  // namespace

v1::StepMetric ToStepMetric(const shard::StepMetrics& m) {
  v1::StepMetric s;
  PutShared(m, &s);
  s.set_compute_seconds(m.compute_seconds);
  s.set_positions(m.positions);
  return s;
}

shard::StepMetrics FromStepMetric(const v1::StepMetric& s, int attempt) {
  shard::StepMetrics m;
  GetShared(s, &m);  // loss_scale 0 from workers too old to send it: "not reported"
  m.attempt = attempt;
  m.compute_seconds = s.compute_seconds();
  m.positions = s.positions();
  m.eval_exact_match = m.eval_samples > 0 ? s.eval_exact_match() : -1;
  m.pairs = s.pairs() > 0 ? s.pairs() : 0;  // the preference figures mean something only with pairs
  m.eval_pairs = s.eval_pairs() > 0 ? s.eval_pairs() : 0;
  GetFigures(s, &m);
  return m;
}

v1::MetricRow ToMetricRow(const shard::StepMetrics& m) {
  v1::MetricRow r;
  PutShared(m, &r);
  r.set_attempt(m.attempt);
  r.set_tokens_per_s(m.seconds > 0 ? m.tokens / m.seconds : 0);
  return r;
}

shard::StepMetrics FromMetricRow(const v1::MetricRow& r) {
  shard::StepMetrics m;
  GetShared(r, &m);
  m.attempt = r.attempt();
  m.eval_exact_match = r.eval_exact_match();
  m.pairs = r.pairs();
  m.eval_pairs = r.eval_pairs();
  GetFigures(r, &m);
  return m;
}

void PutProgressFigures(const v1::StepMetric& last, v1::Progress* p) {
  p->set_pairs(last.pairs());
  p->clear_figures();
  for (const shard::StepMetricField& f : shard::StepMetricFields())  // a step without them shows none
    if (const pb::FieldDescriptor* d = OwnField(*p, f)) p->GetReflection()->ClearField(p, d);
  PutFigures(FromStepMetric(last, 0), p, /*train_only=*/true);
}

std::optional<double> ProgressFigure(const v1::Progress& p, const shard::StepMetricField& f) {
  if (auto it = p.figures().find(std::string(f.name)); it != p.figures().end()) return it->second;
  if (p.figures().empty() && p.pairs() > 0)
    if (const pb::FieldDescriptor* d = OwnField(p, f)) return p.GetReflection()->GetDouble(p, d);
  return std::nullopt;
}

}  // namespace shardd
