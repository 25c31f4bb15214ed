// The job file's preference: section — preference optimisation on pairs of
// replies (docs/preference.md), with TRL's meanings and defaults:
//
//   preference: {method: dpo | ipo | orpo, beta: 0.1, label_smoothing: 0.0, orpo_lambda: 0.1}
//
//   dpo   TRL's DPOTrainer, loss_type sigmoid (with label_smoothing: cDPO /
//         robust DPO): log-probabilities are a reply's summed log-probs,
//         against a reference (the starting model, or the base under peft:).
//   ipo   TRL's loss_type ipo: the same margin on the replies' average
//         log-probs, squared distance to 1/(2·beta).
//   orpo  TRL's ORPOTrainer (reference-free): the chosen reply's SFT loss
//         + orpo_lambda · −log σ(log-odds difference) on average log-probs.
//         beta only scales the reported rewards (rewards/* = beta · logps),
//         as TRL's ORPO rewards do.
//
// train.global_batch and train.micro_batch count pairs. Pure: the loss itself
// is shard/train/preference_loss.h.
#pragma once

#include "shard/common/status.h"
#include "shard/spec/enum_names.h"

namespace shard {

class YamlMap;

// preference.method. kNone: no preference: section (the SFT / LM objective).
enum class PreferenceMethod { kNone, kDpo, kIpo, kOrpo };
inline constexpr EnumName<PreferenceMethod> kPreferenceMethodNames[] = {
    {PreferenceMethod::kDpo, "dpo"}, {PreferenceMethod::kIpo, "ipo"}, {PreferenceMethod::kOrpo, "orpo"}};
inline const char* PreferenceMethodName(PreferenceMethod m) {
  return m == PreferenceMethod::kNone ? "none" : EnumToName(kPreferenceMethodNames, m);
}

struct PreferenceConfig {
  PreferenceMethod method = PreferenceMethod::kNone;
  double beta = 0.1;             // dpo: the KL weight; ipo: the margin target is 1/(2·beta); orpo: rewards' scale
  double label_smoothing = 0.0;  // dpo only: the chance a pair's label is flipped, in [0, 0.5)
  double orpo_lambda = 0.1;      // orpo only: weight of the odds-ratio term beside the SFT loss

  bool enabled() const { return method != PreferenceMethod::kNone; }
  // dpo and ipo score the policy against a reference model's log-probs.
  bool needs_reference() const { return method == PreferenceMethod::kDpo || method == PreferenceMethod::kIpo; }
  // Messages start with "preference.<key>" (the caller adds the file).
  Status Validate() const;
};

// Maps the job file's preference: section (absent: method none). The section
// needs a method; label_smoothing is refused unless it is dpo, orpo_lambda
// unless it is orpo (a key that would be silently ignored).
Status MapPreferenceSection(YamlMap& root, PreferenceConfig* preference);

}  // namespace shard
