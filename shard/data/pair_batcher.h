// PairBatcher: global batches of preference pairs (a PreparedDataset of pairs,
// prepare_sft.h), the pair counterpart of SftBatcher.
//
// train.global_batch counts pairs. The sampler ranges over pairs; pair p is
// samples 2p (chosen) and 2p+1 (rejected), laid out as rows 2k and 2k+1 of
// the batch (one reply per row, never packed, padding after it), so any
// slice of whole pairs — a rank's share, a micro-batch — holds both replies
// of each of its pairs. Every stored pair already fits seq_len + 1 tokens and
// has targets in both replies (FitPair), so a plan never skips: the cursor
// moves by global_batch pairs.
//
// Thread-safety: one thread (the Sampler caches its epoch permutation).
#pragma once

#include <cstdint>
#include <vector>

#include "shard/data/prepared_dataset.h"
#include "shard/data/sampler.h"

namespace shard {

struct PairBatcherOptions {
  int64_t global_batch = 0;  // pairs per optimizer step, all ranks together
  int64_t seq_len = 0;
  int32_t pad_id = 0;        // input token of padding positions (never a target)
};

struct PairPlan {
  std::vector<int64_t> pairs;  // the global batch's pairs, in order
  int64_t consumed = 0;        // sampler positions used: global_batch
  int64_t target_tokens = 0;   // target positions of both replies, whole batch
  int64_t tokens = 0;          // non-padding positions, whole batch
};

class PairBatcher {
 public:
  // data (a dataset of pairs) and sampler (over data's pairs) must outlive it.
  static StatusOr<PairBatcher> Create(const PreparedDataset* data, Sampler* sampler, const PairBatcherOptions& options);

  PairPlan PlanGlobalBatch(int64_t cursor);

  // Pairs [first_pair, first_pair + count) of `plan` as 2·count rows of
  // seq_len entries each (chosen, rejected, chosen, ...). Pairs past the
  // global batch are all padding.
  void FillPairs(const PairPlan& plan, int64_t first_pair, int64_t count, int32_t* tokens, int32_t* targets,
                 int32_t* positions, int32_t* segment_ids) const;

  // The pairs rank `rank` of `world` trains on.
  BatchSlice RankPairs(int rank, int world) const { return RankSlice(options_.global_batch, rank, world); }
  const PairBatcherOptions& options() const { return options_; }

 private:
  PairBatcher(const PreparedDataset* data, Sampler* sampler, const PairBatcherOptions& o)
      : data_(data), sampler_(sampler), options_(o) {}
  const PreparedDataset* data_;
  Sampler* sampler_;
  PairBatcherOptions options_;
};

}  // namespace shard
