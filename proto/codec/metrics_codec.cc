#include "proto/codec/metrics_codec.h"

namespace shardd {

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
  if (m.pairs > 0) {  // an SFT step leaves them unset: its message is as before
    s.set_pairs(m.pairs);
    s.set_rewards_chosen(m.rewards_chosen);
    s.set_rewards_rejected(m.rewards_rejected);
    s.set_rewards_accuracies(m.rewards_accuracies);
    s.set_rewards_margins(m.rewards_margins);
    s.set_logps_chosen(m.logps_chosen);
    s.set_logps_rejected(m.logps_rejected);
    s.set_nll(m.nll);
  }
  if (m.eval_pairs > 0) {  // no eval on pairs at this step: unset, as before
    s.set_eval_pairs(m.eval_pairs);
    s.set_eval_rewards_chosen(m.eval_rewards_chosen);
    s.set_eval_rewards_rejected(m.eval_rewards_rejected);
    s.set_eval_rewards_accuracies(m.eval_rewards_accuracies);
    s.set_eval_rewards_margins(m.eval_rewards_margins);
    s.set_eval_logps_chosen(m.eval_logps_chosen);
    s.set_eval_logps_rejected(m.eval_logps_rejected);
    s.set_eval_nll(m.eval_nll);
  }
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
  if (s.pairs() > 0) {  // the preference figures mean something only with pairs
    m.pairs = s.pairs();
    m.rewards_chosen = s.rewards_chosen();
    m.rewards_rejected = s.rewards_rejected();
    m.rewards_accuracies = s.rewards_accuracies();
    m.rewards_margins = s.rewards_margins();
    m.logps_chosen = s.logps_chosen();
    m.logps_rejected = s.logps_rejected();
    m.nll = s.nll();
  }
  if (s.eval_pairs() > 0) {  // likewise the held-out pairs' figures
    m.eval_pairs = s.eval_pairs();
    m.eval_rewards_chosen = s.eval_rewards_chosen();
    m.eval_rewards_rejected = s.eval_rewards_rejected();
    m.eval_rewards_accuracies = s.eval_rewards_accuracies();
    m.eval_rewards_margins = s.eval_rewards_margins();
    m.eval_logps_chosen = s.eval_logps_chosen();
    m.eval_logps_rejected = s.eval_logps_rejected();
    m.eval_nll = s.eval_nll();
  }
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
  if (m.pairs > 0) {
    r.set_pairs(m.pairs);
    r.set_rewards_chosen(m.rewards_chosen);
    r.set_rewards_rejected(m.rewards_rejected);
    r.set_rewards_accuracies(m.rewards_accuracies);
    r.set_rewards_margins(m.rewards_margins);
    r.set_logps_chosen(m.logps_chosen);
    r.set_logps_rejected(m.logps_rejected);
    r.set_nll(m.nll);
  }
  if (m.eval_pairs > 0) {
    r.set_eval_pairs(m.eval_pairs);
    r.set_eval_rewards_chosen(m.eval_rewards_chosen);
    r.set_eval_rewards_rejected(m.eval_rewards_rejected);
    r.set_eval_rewards_accuracies(m.eval_rewards_accuracies);
    r.set_eval_rewards_margins(m.eval_rewards_margins);
    r.set_eval_logps_chosen(m.eval_logps_chosen);
    r.set_eval_logps_rejected(m.eval_logps_rejected);
    r.set_eval_nll(m.eval_nll);
  }
  return r;
}

}  // namespace shardd
