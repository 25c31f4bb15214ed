#include "shard/train/preference_loss.h"

#include <algorithm>
#include <cmath>

namespace shard {
namespace {

// log σ(x) and σ(x), stable for large |x|.
double LogSigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }
double Sigmoid(double x) {
  if (x >= 0) return 1 / (1 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1 + e);
}

// 1 − eᵃ for an average log-prob a ≤ 0, kept off zero: a reply predicted with
// probability 1 (a = 0, or a rounded above it) has infinite odds; 1e-12
// bounds its log-odds (≈ 27.6) and their gradient instead of returning inf.
double OneMinusP(double a) { return std::max(-std::expm1(a), 1e-12); }

}  // namespace

PairLoss PreferencePairLoss(const PreferenceConfig& c, const PairLogps& p) {
  PairLoss out;
  const double beta = c.beta;
  switch (c.method) {
    case PreferenceMethod::kDpo: {
      const double z = beta * ((p.chosen - p.ref_chosen) - (p.rejected - p.ref_rejected));
      const double ls = c.label_smoothing;
      out.loss = -(1 - ls) * LogSigmoid(z) - ls * LogSigmoid(-z);
      // d/dz −log σ(z) = −σ(−z); d/dz −log σ(−z) = σ(z).
      const double dz = -(1 - ls) * Sigmoid(-z) + ls * Sigmoid(z);
      out.d_chosen = beta * dz;
      out.d_rejected = -beta * dz;
      out.reward_chosen = beta * (p.chosen - p.ref_chosen);
      out.reward_rejected = beta * (p.rejected - p.ref_rejected);
      out.logps_chosen = p.chosen;
      out.logps_rejected = p.rejected;
      break;
    }
    case PreferenceMethod::kIpo: {
      const double nc = static_cast<double>(p.chosen_tokens), nr = static_cast<double>(p.rejected_tokens);
      const double ac = p.chosen / nc, ar = p.rejected / nr;
      const double rc = p.ref_chosen / nc, rr = p.ref_rejected / nr;
      const double h = (ac - rc) - (ar - rr);
      const double e = h - 1 / (2 * beta);
      out.loss = e * e;
      out.d_chosen = 2 * e / nc;
      out.d_rejected = -2 * e / nr;
      out.reward_chosen = beta * (ac - rc);
      out.reward_rejected = beta * (ar - rr);
      out.logps_chosen = ac;
      out.logps_rejected = ar;
      break;
    }
    case PreferenceMethod::kOrpo: {
      const double nc = static_cast<double>(p.chosen_tokens), nr = static_cast<double>(p.rejected_tokens);
      const double ac = p.chosen / nc, ar = p.rejected / nr;
      const double qc = OneMinusP(ac), qr = OneMinusP(ar);
      const double d = (ac - std::log(qc)) - (ar - std::log(qr));
      const double lambda = c.orpo_lambda;
      out.nll = -ac;
      out.loss = out.nll - lambda * LogSigmoid(d);
      // d lo(a)/da = 1 + eᵃ/(1 − eᵃ) = 1/(1 − eᵃ); d/dd −log σ(d) = −σ(−d).
      const double dd = -lambda * Sigmoid(-d);
      out.d_chosen = (-1 + dd / qc) / nc;
      out.d_rejected = (-dd / qr) / nr;
      out.reward_chosen = beta * ac;
      out.reward_rejected = beta * ar;
      out.logps_chosen = ac;
      out.logps_rejected = ar;
      break;
    }
    case PreferenceMethod::kNone:
      break;
  }
  out.accurate = out.reward_chosen > out.reward_rejected;
  return out;
}

void PreferenceSums::Add(const PairLoss& p) {
  pairs += 1;
  loss += p.loss;
  reward_chosen += p.reward_chosen;
  reward_rejected += p.reward_rejected;
  accurate += p.accurate ? 1 : 0;
  logps_chosen += p.logps_chosen;
  logps_rejected += p.logps_rejected;
  nll += p.nll;
}

void PreferenceSums::Add(const PreferenceSums& o) {
  double a[kFields], b[kFields];
  ToArray(a);
  o.ToArray(b);
  for (int i = 0; i < kFields; ++i) a[i] += b[i];
  *this = FromArray(a);
}

void PreferenceSums::ToArray(double out[kFields]) const {
  const double v[kFields] = {pairs, loss, reward_chosen, reward_rejected, accurate, logps_chosen, logps_rejected, nll};
  std::copy(v, v + kFields, out);
}

PreferenceSums PreferenceSums::FromArray(const double in[kFields]) {
  PreferenceSums s;
  s.pairs = in[0];
  s.loss = in[1];
  s.reward_chosen = in[2];
  s.reward_rejected = in[3];
  s.accurate = in[4];
  s.logps_chosen = in[5];
  s.logps_rejected = in[6];
  s.nll = in[7];
  return s;
}

void PutPreferenceFigures(const PreferenceMetrics& pm, bool eval, StepMetrics* m) {
  (eval ? m->eval_loss : m->loss) = pm.loss;
  (eval ? m->eval_rewards_chosen : m->rewards_chosen) = pm.rewards_chosen;
  (eval ? m->eval_rewards_rejected : m->rewards_rejected) = pm.rewards_rejected;
  (eval ? m->eval_rewards_accuracies : m->rewards_accuracies) = pm.rewards_accuracies;
  (eval ? m->eval_rewards_margins : m->rewards_margins) = pm.rewards_margins;
  (eval ? m->eval_logps_chosen : m->logps_chosen) = pm.logps_chosen;
  (eval ? m->eval_logps_rejected : m->logps_rejected) = pm.logps_rejected;
  (eval ? m->eval_nll : m->nll) = pm.nll;
}

PreferenceMetrics MeanMetrics(const PreferenceSums& s) {
  PreferenceMetrics m;
  if (s.pairs <= 0) return m;
  const double n = s.pairs;
  m.loss = s.loss / n;
  m.rewards_chosen = s.reward_chosen / n;
  m.rewards_rejected = s.reward_rejected / n;
  m.rewards_accuracies = s.accurate / n;
  m.rewards_margins = (s.reward_chosen - s.reward_rejected) / n;
  m.logps_chosen = s.logps_chosen / n;
  m.logps_rejected = s.logps_rejected / n;
  m.nll = s.nll / n;
  return m;
}

}  // namespace shard
