// The preference objective on the engine: one micro-batch of pairs, laid out
// as PairBatcher lays them (row 2k pair k's chosen reply, 2k+1 its rejected
// one, seq positions each), through LlamaModel::ForwardBackwardSpans.
//
// The step's loss is the mean of the pairs' losses over the whole step (all
// ranks, all micro-batches): L = (1/P) Σ_pairs L_pair. Each reply's summed
// log-prob S enters its pair's loss, and the model differentiates each
// reply's cross-entropy sum (= −S) with the factor
//     loss_scale · (−dL_pair/dS) / P,
// so accumulation and world size give the same step (each pair's weight is
// known inside its own micro-batch; nothing waits on other ranks).
//
// Thread-safety: one thread (the trainer's).
#pragma once

#include <cstdint>
#include <vector>

#include "shard/model/llama_model.h"
#include "shard/spec/preference_config.h"
#include "shard/train/preference_loss.h"

namespace shard {

class CpGroup;

class PreferenceObjective {
 public:
  explicit PreferenceObjective(const PreferenceConfig& config) : config_(config) {}

  // A step of `global_pairs` pairs (all ranks) under `loss_scale`; clears sums().
  void BeginStep(int64_t global_pairs, double loss_scale);

  // Forward and backward of one micro-batch of b.batch / 2 pairs. host_targets:
  // its targets on the host (b.rows() entries; a reply's token count is its
  // targets >= 0). ref: the reference's summed log-probs, two per pair
  // (chosen, rejected), for dpo and ipo; empty for orpo. Adds the pairs'
  // losses and metrics to sums() and returns their loss sum.
  StatusOr<double> MicroBatch(LlamaModel& model, UnitAccess& access, const DeviceBatch& b,
                              const int32_t* host_targets, const std::vector<double>& ref);

  // This rank's pairs of the step so far (all-reduce them for the step's metrics).
  const PreferenceSums& sums() const { return sums_; }
  const PreferenceConfig& config() const { return config_; }
  // Context parallelism: each row holds this rank's chunks of a reply; the
  // replies' log-prob sums and target counts are summed over `cp` before the
  // pair losses, every member back-propagates each row's factor through its
  // chunks, and only CP rank 0 counts the pairs' losses and metrics (the
  // trainer sums both over the world). Null: whole rows.
  void SetContextParallel(CpGroup* cp) { cp_ = cp; }

 private:
  PreferenceConfig config_;
  CpGroup* cp_ = nullptr;
  int64_t global_pairs_ = 0;
  double loss_scale_ = 1;
  PreferenceSums sums_;
};

// Each row's summed log-prob of its targets (forward only): the reference
// pass over PairBatcher rows (chosen, rejected, ...), two values per pair.
// Under context parallelism (cp non-null) each row holds this rank's chunks and
// the sums are over the group, so every member returns the whole replies'.
StatusOr<std::vector<double>> ReplyLogps(LlamaModel& model, UnitAccess& access, const DeviceBatch& b,
                                         CpGroup* cp = nullptr);

}  // namespace shard
