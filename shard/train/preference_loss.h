// The preference losses (DPO, IPO, ORPO; shard/spec/preference_config.h) as
// pure functions of one pair's per-reply log-probabilities: the loss, its
// gradient with respect to each reply's summed log-prob, and TRL's metrics.
//
// The engine computes S = Σ log π(y_t | x, y_<t) over a reply's target tokens
// (the reply and its end-of-turn token) and, given dL/dS, backpropagates
// through every one of those tokens with weight dL/dS (each token's
// d(log p)/d(logits) = onehot − softmax): the loss never needs more of the
// model than these sums.
//
//   dpo   z = β·((S_c − R_c) − (S_r − R_r)),  L = −(1−ls)·log σ(z) − ls·log σ(−z)
//   ipo   h = (S_c/N_c − R_c/N_c) − (S_r/N_r − R_r/N_r),  L = (h − 1/(2β))²
//   orpo  a = S/N,  L = −a_c + λ·(−log σ(lo(a_c) − lo(a_r))),  lo(a) = a − log(1 − eᵃ)
//
// R are the reference model's sums (dpo, ipo). Metrics follow TRL's names:
// rewards/chosen = β·(logp_c − ref_c) (orpo: β·a_c), rewards/margins = chosen −
// rejected, rewards/accuracies = 1 when chosen > rejected, logps/* = the
// policy's log-probs as the method uses them (sums for dpo, averages for ipo
// and orpo), nll = the chosen reply's mean token NLL (orpo).
//
// ORPO's SFT term is per pair (the chosen reply's mean NLL), where TRL's
// ORPOTrainer pools the chosen tokens of a micro-batch: per pair, the step's
// loss does not depend on how pairs are split into micro-batches and ranks.
//
// All arithmetic in double. Pure; thread-safe.
#pragma once

#include <cstdint>

#include "shard/spec/preference_config.h"
#include "shard/spec/step_metrics.h"

namespace shard {

// One pair's log-probabilities. Token counts are the replies' target tokens (> 0).
struct PairLogps {
  double chosen = 0, rejected = 0;          // the policy's summed log-probs
  int64_t chosen_tokens = 0, rejected_tokens = 0;
  double ref_chosen = 0, ref_rejected = 0;  // the reference's summed log-probs (dpo, ipo)
};

struct PairLoss {
  double loss = 0;
  double d_chosen = 0, d_rejected = 0;  // dL/dS_c, dL/dS_r (the summed log-probs)
  // TRL's per-pair metrics (see above).
  double reward_chosen = 0, reward_rejected = 0;
  double logps_chosen = 0, logps_rejected = 0;
  double nll = 0;  // orpo only (else 0)
  bool accurate = false;  // reward_chosen > reward_rejected
};

PairLoss PreferencePairLoss(const PreferenceConfig& config, const PairLogps& pair);

// Sums of a set of pairs' losses and metrics (a micro-batch, a rank's share of
// a step): add pairs, add other sums (the all-reduce), then Mean().
struct PreferenceSums {
  static constexpr int kFields = 8;
  double pairs = 0, loss = 0, reward_chosen = 0, reward_rejected = 0, accurate = 0, logps_chosen = 0,
         logps_rejected = 0, nll = 0;
  void Add(const PairLoss& p);
  void Add(const PreferenceSums& o);
  // The fields in the order above, for a reduction over ranks.
  void ToArray(double out[kFields]) const;
  static PreferenceSums FromArray(const double in[kFields]);
};

// Means over the pairs, with TRL's metric names (all 0 when there are none).
struct PreferenceMetrics {
  double loss = 0;
  double rewards_chosen = 0, rewards_rejected = 0, rewards_accuracies = 0, rewards_margins = 0;
  double logps_chosen = 0, logps_rejected = 0;
  double nll = 0;
};
PreferenceMetrics MeanMetrics(const PreferenceSums& sums);
// Puts them into a step's record: the training step's figures, or (eval)
// the held-out pairs' eval_ ones; loss goes to loss or eval_loss.
void PutPreferenceFigures(const PreferenceMetrics& pm, bool eval, StepMetrics* m);

}  // namespace shard
