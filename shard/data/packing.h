// Packing: how the samples at a sampler cursor fill a global batch of rows of
// seq_len positions. Pure functions of the sample order and the samples, so every
// rank plans the same global batch and then fills only its own rows.
//
// A sample of L tokens occupies L-1 positions: inputs t[0..L-2], targets
// t[1..L-1] where the mask is set (-1 elsewhere). With packing, samples are laid
// greedily in sampler order; a sample that does not fit the rest of a row starts
// the next row, and the batch ends when its last row is full or the next sample
// does not fit (that sample opens the next batch). Positions restart at 0 per
// sample and each sample has its own segment id, so attention never crosses a
// sample boundary; the tail of a row is padding (pad id, target -1, its own
// segment). Without packing each row holds one sample. A sample longer than
// seq_len + 1 tokens is cut to seq_len + 1 (truncate) or skipped (drop); a
// sample with no target left is skipped either way.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/data_config.h"

namespace shard {

struct SampleView {
  const uint32_t* tokens = nullptr;
  const uint8_t* mask = nullptr;  // 1: the token is a target
  int64_t length = 0;
};

struct PackingOptions {
  int64_t seq_len = 0;
  bool packing = true;
  Overlong overlong = Overlong::kTruncate;
  int32_t pad_id = 0;  // input token of padding positions (never a target)
};

// The first `take` tokens of a sample (take - 1 positions).
struct PackedSpan {
  int64_t sample = 0;
  int64_t take = 0;
};

struct BatchPlan {
  std::vector<std::vector<PackedSpan>> rows;  // global rows, in order
  int64_t consumed = 0;       // sampler positions used (placed + skipped): the cursor advance
  int64_t skipped = 0;        // over-long (drop) or without a target
  int64_t target_tokens = 0;  // positions with a target in the whole global batch
  int64_t tokens = 0;         // non-padding positions in the whole global batch
};

// Mask bits in [1, take): the targets a span contributes.
int64_t SpanTargets(const SampleView& v, int64_t take);

// Plans `num_rows` rows from sampler position `cursor`. sample_at(pos) gives the
// sample at a sampler position, view(sample) its data. INVALID_ARGUMENT (the
// data can never train at this seq_len: no retry helps) when num_samples
// consecutive positions yield nothing placeable (no sample has a target within
// seq_len + 1 tokens).
StatusOr<BatchPlan> PlanBatch(int64_t cursor, int64_t num_rows, const PackingOptions& o, int64_t num_samples,
                              const std::function<int64_t(int64_t)>& sample_at,
                              const std::function<SampleView(int64_t)>& view);

// Writes one planned row: seq_len entries of each array.
void FillRow(const std::vector<PackedSpan>& row, const PackingOptions& o, const std::function<SampleView(int64_t)>& view,
             int32_t* tokens, int32_t* targets, int32_t* positions, int32_t* segment_ids);

}  // namespace shard
