// Where a training step's rows come from. Every rank plans the same global
// batch from the global sampler cursor (a pure function of the cursor, the
// seed and the data), then fills only its own rows; the plan says how far the
// cursor moves and how many target tokens the whole global batch holds (the
// loss normaliser). Neither depends on the world size, so a checkpointed cursor
// resumes exactly on any number of ranks.
//
//   token windows (data.tokens): global_batch windows of seq_len + 1 tokens,
//     every position a target; the cursor moves by global_batch.
//   SFT (data.jsonl): a PreparedDataset packed into global_batch rows by
//     SftBatcher; the cursor moves by the samples placed (or skipped), the
//     target count is what the masks say, and segment ids keep packed samples
//     apart.
//   preference pairs (data.jsonl of pairs, preference:): PairBatcher; items
//     are pairs of two rows (pair_source.h).
//
// Thread-safety: one thread (the sampler caches its epoch permutation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/data/prepare_sft.h"
#include "shard/spec/job_config.h"

namespace shard {

// The whole global batch at one cursor.
struct GlobalBatch {
  int64_t consumed = 0;       // sampler positions used: the cursor advance
  int64_t target_tokens = 0;  // positions with a target, all ranks together
  int64_t tokens = 0;         // non-padding positions, all ranks together
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Plans the global batch at sampler position `cursor`; Fill reads from it.
  virtual StatusOr<GlobalBatch> Plan(int64_t cursor) = 0;
  // Global rows [first_row, first_row + count) of the last plan into arrays of
  // count * seq_len entries. segment_ids is written only when segmented().
  virtual void Fill(int64_t first_row, int64_t count, int32_t* tokens, int32_t* targets, int32_t* positions,
                    int32_t* segment_ids) const = 0;
  // Whether the model needs the segment ids (packed samples must not attend
  // across boundaries).
  virtual bool segmented() const = 0;
  // Rows one item of train.global_batch / micro_batch fills, and so what
  // Fill's first_row and count index: 1 (a sequence), or 2 for a preference
  // pair (chosen, rejected; pair_source.h), written as 2·count rows.
  virtual int rows_per_item() const { return 1; }
  // The dataset indices of items [first, first + count) of the last plan
  // (pairs: their ids, which key the reference log-probs); empty if unknown.
  virtual std::vector<int64_t> ItemIds(int64_t /*first*/, int64_t /*count*/) const { return {}; }
  // For the log: "N windows of T tokens", "N SFT samples (…)".
  virtual std::string Describe() const = 0;
  // What the cursor indexes, for the checkpoint manifest: a resume onto other
  // data is warned about. "" when unknown.
  virtual std::string Fingerprint() const { return ""; }
};


// Rows one item of train.global_batch / micro_batch fills for this job: 2 for
// a preference: job (pairs), else 1. The trainer sizes its buffers with it.
inline int RowsPerItem(const JobConfig& job) { return job.preference.enabled() ? 2 : 1; }

// Where an SFT job's prepared dataset lives: data.prepared, or
// <checkpoint.dir>/<job name>/data/sft.
std::string SftPreparedPrefix(const JobConfig& job);
// What EnsurePrepared needs for an SFT job (data.jsonl set).
PrepareSftOptions SftPrepareOptions(const JobConfig& job);

}  // namespace shard
