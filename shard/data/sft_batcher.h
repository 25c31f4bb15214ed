// SftBatcher: global batches of packed SFT rows for a trainer rank, the SFT
// counterpart of TokenWindows + RankSlice.
//
// Every rank plans the same global batch (PlanGlobalBatch is a pure function of
// the cursor, the sampler's seed and the dataset), then fills only its own rows
// (RankRows). The plan says how far the cursor moves (consumed) and how many
// target tokens the whole global batch holds, which is what the loss is
// normalised by; neither depends on the world size, so a resumed run continues
// exactly from a checkpointed cursor whatever the new world size.
//
// Thread-safety: one thread (the Sampler caches its epoch permutation).
#pragma once

#include <cstdint>

#include "shard/data/packing.h"
#include "shard/data/prepared_dataset.h"
#include "shard/data/sampler.h"

namespace shard {

struct SftBatcherOptions {
  int64_t global_batch = 0;  // rows of seq_len per optimizer step, all ranks together
  PackingOptions packing;
};

class SftBatcher {
 public:
  // data and sampler must outlive the batcher; the sampler must range over
  // data.num_samples().
  static StatusOr<SftBatcher> Create(const PreparedDataset* data, Sampler* sampler, const SftBatcherOptions& options);

  // The global batch starting at sampler position `cursor` (the trainer's
  // samples_seen); advance the cursor by plan.consumed after the step.
  StatusOr<BatchPlan> PlanGlobalBatch(int64_t cursor);

  // Writes global rows [first_row, first_row + count) of `plan` into arrays of
  // count * seq_len entries. Rows past the global batch are all padding.
  void FillRows(const BatchPlan& plan, int64_t first_row, int64_t count, int32_t* tokens, int32_t* targets,
                int32_t* positions, int32_t* segment_ids) const;

  // The global rows rank `rank` of `world` trains on.
  BatchSlice RankRows(int rank, int world) const { return RankSlice(options_.global_batch, rank, world); }
  const SftBatcherOptions& options() const { return options_; }

 private:
  SftBatcher(const PreparedDataset* data, Sampler* sampler, const SftBatcherOptions& o)
      : data_(data), sampler_(sampler), options_(o) {}
  const PreparedDataset* data_;
  Sampler* sampler_;
  SftBatcherOptions options_;
};

}  // namespace shard
