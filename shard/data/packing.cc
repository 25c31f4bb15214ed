#include "shard/data/packing.h"

#include <algorithm>
#include <string>

namespace shard {

int64_t SpanTargets(const SampleView& v, int64_t take) {
  int64_t n = 0;
  for (int64_t i = 1; i < take; ++i) n += v.mask[i];
  return n;
}

StatusOr<BatchPlan> PlanBatch(int64_t cursor, int64_t num_rows, const PackingOptions& o, int64_t num_samples,
                              const std::function<int64_t(int64_t)>& sample_at,
                              const std::function<SampleView(int64_t)>& view) {
  if (o.seq_len <= 0) return InvalidArgument("packing: seq_len must be > 0");
  if (num_rows <= 0) return InvalidArgument("packing: a batch needs at least one row");
  if (num_samples <= 0) return InvalidArgument("packing: the dataset has no samples");
  const int64_t T = o.seq_len;
  BatchPlan plan;
  plan.rows.resize(num_rows);
  int64_t row = 0, used = 0, pos = cursor, since_placed = 0;
  while (row < num_rows) {
    if (since_placed > num_samples)
      return InvalidArgument("packing: no sample has a target token within the first seq_len+1 = " +
                                std::to_string(T + 1) + " tokens (prompts too long for seq_len" +
                                (o.overlong == Overlong::kDrop ? ", or every sample is over-long and dropped" : "") + ")");
    const int64_t s = sample_at(pos);
    const SampleView v = view(s);
    if (v.length > T + 1 && o.overlong == Overlong::kDrop) {
      ++pos, ++plan.skipped, ++since_placed;
      continue;
    }
    const int64_t take = std::min(v.length, T + 1);
    const int64_t targets = take >= 2 ? SpanTargets(v, take) : 0;
    if (targets == 0) {
      ++pos, ++plan.skipped, ++since_placed;
      continue;
    }
    const int64_t need = take - 1;
    if (o.packing && used > 0 && used + need > T) {  // the next row takes it
      ++row;
      used = 0;
      continue;
    }
    plan.rows[row].push_back({s, take});
    plan.target_tokens += targets;
    plan.tokens += need;
    used += need;
    ++pos;
    since_placed = 0;
    if (!o.packing || used == T) {
      ++row;
      used = 0;
    }
  }
  plan.consumed = pos - cursor;
  return plan;
}

void FillRow(const std::vector<PackedSpan>& row, const PackingOptions& o, const std::function<SampleView(int64_t)>& view,
             int32_t* tokens, int32_t* targets, int32_t* positions, int32_t* segment_ids) {
  const int64_t T = o.seq_len;
  int64_t c = 0;
  int32_t seg = 0;
  for (const PackedSpan& span : row) {
    const SampleView v = view(span.sample);
    for (int64_t j = 0; j + 1 < span.take && c < T; ++j, ++c) {
      tokens[c] = static_cast<int32_t>(v.tokens[j]);
      targets[c] = v.mask[j + 1] ? static_cast<int32_t>(v.tokens[j + 1]) : -1;
      positions[c] = static_cast<int32_t>(j);
      segment_ids[c] = seg;
    }
    ++seg;
  }
  for (int64_t j = 0; c < T; ++c, ++j) {
    tokens[c] = o.pad_id;
    targets[c] = -1;
    positions[c] = static_cast<int32_t>(j);
    segment_ids[c] = seg;
  }
}

}  // namespace shard
