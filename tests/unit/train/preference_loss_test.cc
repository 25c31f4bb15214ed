// The preference losses (shard/train/preference_loss.h) against independent
// double-precision formulas written here: TRL's DPO (sigmoid, with and
// without label smoothing), IPO on average log-probs and ORPO's SFT + odds
// ratio; their gradients against central differences of those formulas; the
// TRL metrics; and the sums that make a step's mean independent of how its
// pairs are split.
#include "shard/train/preference_loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

namespace shard {
namespace {

PreferenceConfig Config(PreferenceMethod m, double beta = 0.1, double ls = 0.0, double lambda = 0.1) {
  PreferenceConfig c;
  c.method = m;
  c.beta = beta;
  c.label_smoothing = ls;
  c.orpo_lambda = lambda;
  return c;
}

// The formulas as the papers and TRL write them, naively.
double Sigm(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double DpoRef(const PreferenceConfig& c, const PairLogps& p) {
  const double pi_logratios = p.chosen - p.rejected;
  const double ref_logratios = p.ref_chosen - p.ref_rejected;
  const double logits = pi_logratios - ref_logratios;
  return -std::log(Sigm(c.beta * logits)) * (1 - c.label_smoothing) -
         std::log(Sigm(-c.beta * logits)) * c.label_smoothing;
}

double IpoRef(const PreferenceConfig& c, const PairLogps& p) {
  const double pc = p.chosen / p.chosen_tokens, pr = p.rejected / p.rejected_tokens;
  const double rc = p.ref_chosen / p.chosen_tokens, rr = p.ref_rejected / p.rejected_tokens;
  const double logits = (pc - pr) - (rc - rr);
  return std::pow(logits - 1 / (2 * c.beta), 2);
}

double OrpoRef(const PreferenceConfig& c, const PairLogps& p) {
  const double ac = p.chosen / p.chosen_tokens, ar = p.rejected / p.rejected_tokens;
  const double odds_c = std::exp(ac) / (1 - std::exp(ac)), odds_r = std::exp(ar) / (1 - std::exp(ar));
  const double ratio = std::log(odds_c / odds_r);
  return -ac - c.orpo_lambda * std::log(Sigm(ratio));
}

double RefLoss(const PreferenceConfig& c, const PairLogps& p) {
  switch (c.method) {
    case PreferenceMethod::kDpo: return DpoRef(c, p);
    case PreferenceMethod::kIpo: return IpoRef(c, p);
    default: return OrpoRef(c, p);
  }
}

// Central differences of the reference loss in the summed log-probs.
void ExpectGradients(const PreferenceConfig& c, const PairLogps& p, const PairLoss& got) {
  const double h = 1e-5;
  PairLogps a = p, b = p;
  a.chosen += h;
  b.chosen -= h;
  const double dc = (RefLoss(c, a) - RefLoss(c, b)) / (2 * h);
  a = p;
  b = p;
  a.rejected += h;
  b.rejected -= h;
  const double dr = (RefLoss(c, a) - RefLoss(c, b)) / (2 * h);
  EXPECT_NEAR(got.d_chosen, dc, 1e-7 + 1e-6 * std::fabs(dc));
  EXPECT_NEAR(got.d_rejected, dr, 1e-7 + 1e-6 * std::fabs(dr));
}

std::vector<PairLogps> Pairs() {
  return {
      {-12.5, -15.0, 5, 7, -13.0, -14.0},
      {-40.0, -22.0, 20, 11, -38.5, -25.0},
      {-3.0, -3.0, 3, 3, -3.0, -3.0},
      {-101.0, -250.0, 64, 90, -120.0, -200.0},
      {-0.7, -9.3, 2, 4, -1.1, -8.0},
  };
}

TEST(PreferenceLoss, DpoMatchesTrlsSigmoidLossAndItsGradient) {
  for (double ls : {0.0, 0.1, 0.3}) {
    for (double beta : {0.1, 0.5}) {
      const PreferenceConfig c = Config(PreferenceMethod::kDpo, beta, ls);
      for (const PairLogps& p : Pairs()) {
        const PairLoss got = PreferencePairLoss(c, p);
        EXPECT_NEAR(got.loss, DpoRef(c, p), 1e-12 * (1 + DpoRef(c, p))) << "ls " << ls << " beta " << beta;
        ExpectGradients(c, p, got);
        // Summed log-probs: d/dS_c = −d/dS_r.
        EXPECT_DOUBLE_EQ(got.d_chosen, -got.d_rejected);
        EXPECT_DOUBLE_EQ(got.reward_chosen, beta * (p.chosen - p.ref_chosen));
        EXPECT_DOUBLE_EQ(got.reward_rejected, beta * (p.rejected - p.ref_rejected));
        EXPECT_EQ(got.logps_chosen, p.chosen);
        EXPECT_EQ(got.logps_rejected, p.rejected);
        EXPECT_EQ(got.accurate, got.reward_chosen > got.reward_rejected);
        EXPECT_EQ(got.nll, 0);
      }
    }
  }
  // The policy equal to its reference: log 2, and a push of beta/2 each way.
  const PairLoss at0 = PreferencePairLoss(Config(PreferenceMethod::kDpo), {-5, -6, 2, 3, -5, -6});
  EXPECT_NEAR(at0.loss, std::log(2.0), 1e-15);
  EXPECT_NEAR(at0.d_chosen, -0.05, 1e-15);
  EXPECT_FALSE(at0.accurate);  // a tie is not a win (TRL: chosen > rejected)
}

TEST(PreferenceLoss, IpoUsesAverageLogProbs) {
  for (double beta : {0.1, 1.0}) {
    const PreferenceConfig c = Config(PreferenceMethod::kIpo, beta);
    for (const PairLogps& p : Pairs()) {
      const PairLoss got = PreferencePairLoss(c, p);
      EXPECT_NEAR(got.loss, IpoRef(c, p), 1e-12 * (1 + IpoRef(c, p)));
      ExpectGradients(c, p, got);
      EXPECT_DOUBLE_EQ(got.logps_chosen, p.chosen / p.chosen_tokens);
      EXPECT_DOUBLE_EQ(got.logps_rejected, p.rejected / p.rejected_tokens);
      EXPECT_NEAR(got.reward_chosen, beta * (p.chosen - p.ref_chosen) / p.chosen_tokens, 1e-15);
    }
  }
}

TEST(PreferenceLoss, OrpoIsSftPlusLambdaOddsRatio) {
  for (double lambda : {0.1, 1.0}) {
    const PreferenceConfig c = Config(PreferenceMethod::kOrpo, 0.2, 0.0, lambda);
    for (const PairLogps& p : Pairs()) {
      const PairLoss got = PreferencePairLoss(c, p);
      EXPECT_NEAR(got.loss, OrpoRef(c, p), 1e-11 * (1 + OrpoRef(c, p)));
      ExpectGradients(c, p, got);
      EXPECT_DOUBLE_EQ(got.nll, -p.chosen / p.chosen_tokens);
      EXPECT_DOUBLE_EQ(got.reward_chosen, 0.2 * p.chosen / p.chosen_tokens);
      EXPECT_DOUBLE_EQ(got.reward_rejected, 0.2 * p.rejected / p.rejected_tokens);
    }
  }
  // lambda 0 is plain SFT on the chosen reply: dL/dS_c = −1/N_c, nothing on the rejected.
  const PairLoss sft = PreferencePairLoss(Config(PreferenceMethod::kOrpo, 0.1, 0.0, 0.0), Pairs()[0]);
  EXPECT_DOUBLE_EQ(sft.d_chosen, -1.0 / 5);
  EXPECT_EQ(sft.d_rejected, 0);
}

// Extreme margins stay finite (no log(0), no inf − inf).
TEST(PreferenceLoss, ExtremeMarginsStayFinite) {
  for (PreferenceMethod m : {PreferenceMethod::kDpo, PreferenceMethod::kIpo, PreferenceMethod::kOrpo}) {
    for (const PairLogps& p : {PairLogps{-1, -5000, 4, 4, -2000, -2}, PairLogps{-5000, -1, 4, 4, -2, -2000},
                               PairLogps{0.0, -1e-9, 3, 3, 0, 0}}) {
      const PairLoss got = PreferencePairLoss(Config(m, 0.1, m == PreferenceMethod::kDpo ? 0.1 : 0.0), p);
      EXPECT_TRUE(std::isfinite(got.loss)) << PreferenceMethodName(m);
      EXPECT_TRUE(std::isfinite(got.d_chosen) && std::isfinite(got.d_rejected)) << PreferenceMethodName(m);
    }
  }
  const PairLoss big = PreferencePairLoss(Config(PreferenceMethod::kDpo), {-1, -5000, 4, 4, -1, -1});
  EXPECT_NEAR(big.loss, 0, 1e-100);
  const PairLoss bad = PreferencePairLoss(Config(PreferenceMethod::kDpo), {-5000, -1, 4, 4, -1, -1});
  EXPECT_NEAR(bad.loss, 0.1 * 4999, 1e-9);
}

// A step's metrics are the mean over its pairs whatever way they were split
// (micro-batches, ranks): sums add, then divide once.
TEST(PreferenceLoss, SumsMakeTheMeanIndependentOfTheSplit) {
  const PreferenceConfig c = Config(PreferenceMethod::kOrpo, 0.1, 0.0, 0.5);
  PreferenceSums all, first, second;
  const auto pairs = Pairs();
  for (size_t i = 0; i < pairs.size(); ++i) {
    const PairLoss l = PreferencePairLoss(c, pairs[i]);
    all.Add(l);
    (i < 2 ? first : second).Add(l);
  }
  double wire[PreferenceSums::kFields];
  second.ToArray(wire);
  first.Add(PreferenceSums::FromArray(wire));
  const PreferenceMetrics a = MeanMetrics(all), b = MeanMetrics(first);
  EXPECT_EQ(all.pairs, 5);
  EXPECT_DOUBLE_EQ(a.loss, b.loss);
  EXPECT_DOUBLE_EQ(a.rewards_margins, b.rewards_margins);
  double loss = 0, acc = 0, margin = 0, lc = 0, nll = 0;
  for (const PairLogps& p : pairs) {
    loss += OrpoRef(c, p);
    const double ac = p.chosen / p.chosen_tokens, ar = p.rejected / p.rejected_tokens;
    acc += ac > ar ? 1 : 0;
    margin += 0.1 * (ac - ar);
    lc += ac;
    nll += -ac;
  }
  EXPECT_NEAR(a.loss, loss / 5, 1e-12);
  EXPECT_DOUBLE_EQ(a.rewards_accuracies, acc / 5);
  EXPECT_NEAR(a.rewards_margins, margin / 5, 1e-12);
  EXPECT_NEAR(a.logps_chosen, lc / 5, 1e-12);
  EXPECT_NEAR(a.nll, nll / 5, 1e-12);
  EXPECT_EQ(MeanMetrics(PreferenceSums{}).loss, 0);
}

}  // namespace
}  // namespace shard
