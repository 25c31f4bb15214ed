// Forward-only scoring of a prepared set of preference pairs through the
// trainer's sharded weights: each reply's summed target log-prob (the
// reference pass over the training and eval pairs, and eval: on held-out
// pairs), and the pairs' losses and TRL metrics from those log-probs.
//
// Sharded as the SFT eval is (sft_eval.h): runs of micro·world pairs, rank r
// taking pairs [run + r·micro, run + (r+1)·micro) of each. Every rank makes
// the same number of forwards (a placeholder pair of padding where it has no
// pair left), because each forward gathers the units collectively.
//
// Thread-safety: one thread (the trainer's; the model owns scratch buffers).
#pragma once

#include <cstdint>
#include <vector>

#include "shard/data/prepared_dataset.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/model/llama_model.h"
#include "shard/spec/preference_config.h"
#include "shard/train/preference_loss.h"

namespace shard {

class CpGroup;

struct PairScoringOptions {
  int64_t micro = 0;      // pairs per forward (2·micro rows; the model's max_batch must hold them)
  int64_t seq_len = 0;    // positions per row: the seq_len the pairs were prepared for
  int64_t max_pairs = 0;  // score pairs [0, max_pairs); 0 = all
  int rank = 0;   // the data rank (DataRank: the members of a CP group score the same pairs)
  int world = 1;  // the data ranks
  CpGroup* cp = nullptr;  // context parallelism: rows split over the group, log-probs summed; null at C = 1
};

// One rank's share of the pairs and what scoring found.
struct ScoredPairs {
  std::vector<int64_t> pairs;   // pair ids, ascending
  std::vector<double> logps;    // two per pair (chosen, rejected): summed target log-probs
  std::vector<int64_t> tokens;  // two per pair: the replies' target tokens
};

// Scores this rank's share of `data`'s pairs with the weights `runtime` hands
// out through `model` (with whatever LoRA binding the model holds). A
// collective: every rank calls it with the same data and options.
StatusOr<ScoredPairs> ScorePairs(LlamaModel& model, FsdpRuntime& runtime, Backend* backend,
                                 const PreparedDataset& data, const PairScoringOptions& options);

// The scored pairs' losses and metrics. ref: the reference's summed log-probs
// of every pair of the set, two per pair id (dpo, ipo); empty for orpo.
// Pure; INVALID_ARGUMENT when ref does not cover the pairs.
StatusOr<PreferenceSums> ScoredPairSums(const PreferenceConfig& config, const ScoredPairs& scored,
                                        const std::vector<double>& ref);

}  // namespace shard
