#include "proto/codec/metrics_codec.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "shard/spec/step_metric_fields.h"

namespace shardd {
namespace {

namespace pb = google::protobuf;

// A figure's own proto field (the older wire form, kept for older readers
// and writers), found by the table's name; nullptr when it has none.
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

}  // namespace

v1::StepMetric ToStepMetric(const shard::StepMetrics& m) {
  v1::StepMetric s;
  s.set_step(m.step);
  s.set_loss(m.loss);
  s.set_lr(m.lr);
  s.set_grad_norm(m.grad_norm);
  s.set_tokens(m.tokens);
  s.set_seconds(m.seconds);
  s.set_compute_seconds(m.compute_seconds);
  s.set_skipped(m.skipped);
  s.set_loss_scale(m.loss_scale);
  s.set_positions(m.positions);
  s.set_eval_samples(m.eval_samples);
  s.set_eval_loss(m.eval_loss);
  s.set_eval_exact_match(m.eval_exact_match);
  if (m.pairs > 0) s.set_pairs(m.pairs);  // an SFT step leaves them unset: its message is as before
  if (m.eval_pairs > 0) s.set_eval_pairs(m.eval_pairs);
  PutExpertLoad(m, &s);
  PutFigures(m, &s);
  return s;
}

shard::StepMetrics FromStepMetric(const v1::StepMetric& s, int attempt) {
  shard::StepMetrics m;
  m.step = s.step();
  m.attempt = attempt;
  m.loss = s.loss();
  m.lr = s.lr();
  m.grad_norm = s.grad_norm();
  m.seconds = s.seconds();
  m.compute_seconds = s.compute_seconds();
  m.tokens = s.tokens();
  m.skipped = s.skipped();
  m.loss_scale = s.loss_scale();  // 0 from workers too old to send it: "not reported"
  m.positions = s.positions();
  m.eval_samples = s.eval_samples();
  m.eval_loss = s.eval_loss();
  m.eval_exact_match = m.eval_samples > 0 ? s.eval_exact_match() : -1;
  m.pairs = s.pairs() > 0 ? s.pairs() : 0;  // the preference figures mean something only with pairs
  m.eval_pairs = s.eval_pairs() > 0 ? s.eval_pairs() : 0;
  m.moe_experts = s.moe_experts();
  m.expert_load.assign(s.expert_load().begin(), s.expert_load().end());
  m.moe_layers = m.moe_experts > 0 ? static_cast<int64_t>(m.expert_load.size()) / m.moe_experts : 0;
  GetFigures(s, &m);
  return m;
}

v1::MetricRow ToMetricRow(const shard::StepMetrics& m) {
  v1::MetricRow r;
  r.set_step(m.step);
  r.set_attempt(m.attempt);
  r.set_loss(m.loss);
  r.set_lr(m.lr);
  r.set_grad_norm(m.grad_norm);
  r.set_tokens(m.tokens);
  r.set_seconds(m.seconds);
  r.set_tokens_per_s(m.seconds > 0 ? m.tokens / m.seconds : 0);
  r.set_skipped(m.skipped);
  r.set_loss_scale(m.loss_scale);
  r.set_eval_samples(m.eval_samples);
  r.set_eval_loss(m.eval_loss);
  r.set_eval_exact_match(m.eval_exact_match);
  if (m.pairs > 0) r.set_pairs(m.pairs);
  if (m.eval_pairs > 0) r.set_eval_pairs(m.eval_pairs);
  PutExpertLoad(m, &r);
  PutFigures(m, &r);
  return r;
}

shard::StepMetrics FromMetricRow(const v1::MetricRow& r) {
  shard::StepMetrics m;
  m.step = r.step();
  m.attempt = r.attempt();
  m.loss = r.loss();
  m.lr = r.lr();
  m.grad_norm = r.grad_norm();
  m.tokens = r.tokens();
  m.seconds = r.seconds();
  m.skipped = r.skipped();
  m.loss_scale = r.loss_scale();
  m.eval_samples = r.eval_samples();
  m.eval_loss = r.eval_loss();
  m.eval_exact_match = r.eval_exact_match();
  m.pairs = r.pairs();
  m.eval_pairs = r.eval_pairs();
  m.moe_experts = r.moe_experts();
  m.expert_load.assign(r.expert_load().begin(), r.expert_load().end());
  m.moe_layers = m.moe_experts > 0 ? static_cast<int64_t>(m.expert_load.size()) / m.moe_experts : 0;
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
