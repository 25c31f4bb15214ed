// proto/codec/metrics_codec.h: a step's figures survive StepMetrics -> the
// worker's StepMetric -> StepMetrics -> the API's MetricRow, a preference:
// step's TRL metrics included (pairs, rewards/*, logps/*, nll); an SFT step
// carries none of them, and a StepMetric without pairs (an SFT step, an older
// worker) reads as an SFT step.
#include "proto/codec/metrics_codec.h"

#include <gtest/gtest.h>

#include <cmath>

namespace shardd {
namespace {

shard::StepMetrics SftStep() {
  shard::StepMetrics m;
  m.step = 7;
  m.loss = 2.5;
  m.lr = 3e-4;
  m.grad_norm = 0.75;
  m.seconds = 0.5;
  m.tokens = 1024;
  m.loss_scale = 1;
  m.positions = 1200;
  return m;
}

shard::StepMetrics DpoStep() {
  shard::StepMetrics m = SftStep();
  m.pairs = 8;
  m.rewards_chosen = 0.125;
  m.rewards_rejected = -0.25;
  m.rewards_accuracies = 0.875;
  m.rewards_margins = 0.375;
  m.logps_chosen = -12.5;
  m.logps_rejected = -20.25;
  m.nll = 1.5;  // an ORPO figure; carried whatever the method
  return m;
}

void ExpectSamePreference(const shard::StepMetrics& a, const shard::StepMetrics& b) {
  EXPECT_EQ(a.pairs, b.pairs);
  EXPECT_EQ(a.rewards_chosen, b.rewards_chosen);
  EXPECT_EQ(a.rewards_rejected, b.rewards_rejected);
  EXPECT_EQ(a.rewards_accuracies, b.rewards_accuracies);
  EXPECT_EQ(a.rewards_margins, b.rewards_margins);
  EXPECT_EQ(a.logps_chosen, b.logps_chosen);
  EXPECT_EQ(a.logps_rejected, b.logps_rejected);
  EXPECT_EQ(a.nll, b.nll);
}

TEST(MetricsCodecTest, APreferenceStepRoundTripsThroughTheWorkersMessage) {
  const shard::StepMetrics m = DpoStep();
  const v1::StepMetric wire = ToStepMetric(m);
  v1::StepMetric parsed;  // as the coordinator receives it
  ASSERT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
  const shard::StepMetrics back = FromStepMetric(parsed, 3);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.attempt, 3);
  EXPECT_EQ(back.loss, 2.5);
  EXPECT_EQ(back.grad_norm, 0.75);
  EXPECT_EQ(back.tokens, 1024);
  ExpectSamePreference(back, m);

  const v1::MetricRow row = ToMetricRow(back);
  EXPECT_EQ(row.pairs(), 8);
  EXPECT_EQ(row.rewards_chosen(), 0.125);
  EXPECT_EQ(row.rewards_rejected(), -0.25);
  EXPECT_EQ(row.rewards_accuracies(), 0.875);
  EXPECT_EQ(row.rewards_margins(), 0.375);
  EXPECT_EQ(row.logps_chosen(), -12.5);
  EXPECT_EQ(row.logps_rejected(), -20.25);
  EXPECT_EQ(row.nll(), 1.5);
  EXPECT_EQ(row.attempt(), 3);
}

TEST(MetricsCodecTest, ASkippedPreferenceStepKeepsItsNaNs) {
  shard::StepMetrics m = DpoStep();
  m.skipped = true;
  m.rewards_chosen = std::nan("");
  m.logps_rejected = -INFINITY;
  const shard::StepMetrics back = FromStepMetric(ToStepMetric(m), 1);
  EXPECT_TRUE(std::isnan(back.rewards_chosen));
  EXPECT_EQ(back.logps_rejected, -INFINITY);
  EXPECT_TRUE(std::isnan(ToMetricRow(back).rewards_chosen()));
}

TEST(MetricsCodecTest, AnSftStepCarriesNoPreferenceFields) {
  const shard::StepMetrics m = SftStep();
  const v1::StepMetric wire = ToStepMetric(m);
  EXPECT_EQ(wire.pairs(), 0);
  const shard::StepMetrics back = FromStepMetric(wire, 1);
  EXPECT_EQ(back.pairs, 0);
  EXPECT_EQ(back.rewards_accuracies, 0);
  EXPECT_EQ(ToMetricRow(back).pairs(), 0);
  // Figures without pairs (no worker sends them) are not a preference step.
  v1::StepMetric stray = wire;
  (*stray.mutable_figures())["rewards_margins"] = 4;
  EXPECT_EQ(FromStepMetric(stray, 1).rewards_margins, 0);
}

// eval: on held-out pairs after a DPO step: TRL's eval/ metrics.
shard::StepMetrics DpoEvalStep() {
  shard::StepMetrics m = DpoStep();
  m.eval_samples = 4;
  m.eval_loss = 0.625;
  m.eval_pairs = 4;
  m.eval_rewards_chosen = 0.0625;
  m.eval_rewards_rejected = -0.125;
  m.eval_rewards_accuracies = 0.75;
  m.eval_rewards_margins = 0.1875;
  m.eval_logps_chosen = -14.5;
  m.eval_logps_rejected = -18.75;
  m.eval_nll = 2.5;
  return m;
}

TEST(MetricsCodecTest, APairEvaluationRoundTripsThroughTheWorkersMessage) {
  const shard::StepMetrics m = DpoEvalStep();
  v1::StepMetric parsed;
  ASSERT_TRUE(parsed.ParseFromString(ToStepMetric(m).SerializeAsString()));
  const shard::StepMetrics back = FromStepMetric(parsed, 2);
  EXPECT_EQ(back.eval_samples, 4);
  EXPECT_EQ(back.eval_loss, 0.625);
  EXPECT_EQ(back.eval_pairs, 4);
  EXPECT_EQ(back.eval_rewards_chosen, 0.0625);
  EXPECT_EQ(back.eval_rewards_rejected, -0.125);
  EXPECT_EQ(back.eval_rewards_accuracies, 0.75);
  EXPECT_EQ(back.eval_rewards_margins, 0.1875);
  EXPECT_EQ(back.eval_logps_chosen, -14.5);
  EXPECT_EQ(back.eval_logps_rejected, -18.75);
  EXPECT_EQ(back.eval_nll, 2.5);
  ExpectSamePreference(back, m);

  const v1::MetricRow row = ToMetricRow(back);
  EXPECT_EQ(row.eval_pairs(), 4);
  EXPECT_EQ(row.eval_rewards_chosen(), 0.0625);
  EXPECT_EQ(row.eval_rewards_rejected(), -0.125);
  EXPECT_EQ(row.eval_rewards_accuracies(), 0.75);
  EXPECT_EQ(row.eval_rewards_margins(), 0.1875);
  EXPECT_EQ(row.eval_logps_chosen(), -14.5);
  EXPECT_EQ(row.eval_logps_rejected(), -18.75);
  EXPECT_EQ(row.eval_nll(), 2.5);
}

// A step without an evaluation on pairs (an SFT eval, no eval at all, an
// older worker) carries none of the eval/ fields: its message is as before.
TEST(MetricsCodecTest, AStepWithoutPairEvaluationCarriesNoEvalPairFields) {
  shard::StepMetrics sft_eval = SftStep();
  sft_eval.eval_samples = 40;
  sft_eval.eval_loss = 3.75;
  sft_eval.eval_exact_match = 0.25;
  const v1::StepMetric wire = ToStepMetric(sft_eval);
  v1::StepMetric before = wire;  // what the message held before these fields
  EXPECT_EQ(wire.SerializeAsString(), before.SerializeAsString());
  EXPECT_EQ(wire.eval_pairs(), 0);
  EXPECT_EQ(ToStepMetric(DpoStep()).eval_pairs(), 0);
  const shard::StepMetrics back = FromStepMetric(wire, 1);
  EXPECT_EQ(back.eval_pairs, 0);
  EXPECT_EQ(back.eval_samples, 40);
  EXPECT_EQ(ToMetricRow(back).eval_pairs(), 0);
  // Figures without eval pairs (no worker sends them) are not an evaluation on pairs.
  v1::StepMetric stray = wire;
  (*stray.mutable_figures())["eval_rewards_margins"] = 4;
  EXPECT_EQ(FromStepMetric(stray, 1).eval_rewards_margins, 0);
  shard::StepMetrics no_pairs = sft_eval;
  no_pairs.eval_rewards_accuracies = 0.5;  // eval_pairs 0: not sent
  EXPECT_EQ(ToStepMetric(no_pairs).SerializeAsString(), wire.SerializeAsString());
  EXPECT_EQ(ToMetricRow(no_pairs).eval_rewards_accuracies(), 0);
}

}  // namespace
}  // namespace shardd
