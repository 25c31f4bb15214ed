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
  stray.set_rewards_margins(4);
  EXPECT_EQ(FromStepMetric(stray, 1).rewards_margins, 0);
}

}  // namespace
}  // namespace shardd
