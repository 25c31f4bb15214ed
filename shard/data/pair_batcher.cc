#include "shard/data/pair_batcher.h"

#include "shard/data/packing.h"

namespace shard {

StatusOr<PairBatcher> PairBatcher::Create(const PreparedDataset* data, Sampler* sampler, const PairBatcherOptions& o) {
  if (o.global_batch <= 0) return InvalidArgument("PairBatcher: global_batch must be > 0");
  if (o.seq_len <= 0) return InvalidArgument("PairBatcher: seq_len must be > 0");
  const PreparedHeader& h = data->header();
  if (!h.pairs) return InvalidArgument("PairBatcher: the prepared dataset holds SFT samples, not preference pairs");
  if (h.num_pairs() == 0) return InvalidArgument("PairBatcher: the prepared dataset holds no pairs");
  if (h.seq_len != o.seq_len)
    return InvalidArgument("PairBatcher: the pairs were fitted to seq_len " + std::to_string(h.seq_len) +
                           ", the job trains at " + std::to_string(o.seq_len) + " (prepare them again)");
  if (sampler->num_samples() != h.num_pairs())
    return InvalidArgument("PairBatcher: the sampler ranges over " + std::to_string(sampler->num_samples()) +
                           " positions, the dataset has " + std::to_string(h.num_pairs()) + " pairs");
  return PairBatcher(data, sampler, o);
}

PairPlan PairBatcher::PlanGlobalBatch(int64_t cursor) {
  PairPlan plan;
  plan.consumed = options_.global_batch;
  for (int64_t i = 0; i < options_.global_batch; ++i) {
    const int64_t p = sampler_->At(cursor + i);
    plan.pairs.push_back(p);
    for (int64_t s : {2 * p, 2 * p + 1}) {
      const SampleView v = data_->sample(s);
      plan.target_tokens += SpanTargets(v, v.length);
      plan.tokens += v.length - 1;
    }
  }
  return plan;
}

void PairBatcher::FillPairs(const PairPlan& plan, int64_t first_pair, int64_t count, int32_t* tokens,
                            int32_t* targets, int32_t* positions, int32_t* segment_ids) const {
  PackingOptions po;
  po.seq_len = options_.seq_len;
  po.packing = false;
  po.pad_id = options_.pad_id;
  const int64_t T = options_.seq_len;
  auto view = [this](int64_t s) { return data_->sample(s); };
  for (int64_t k = 0; k < count; ++k) {
    const int64_t g = first_pair + k;
    for (int64_t side = 0; side < 2; ++side) {
      std::vector<PackedSpan> row;
      if (g >= 0 && g < static_cast<int64_t>(plan.pairs.size())) {
        const int64_t s = 2 * plan.pairs[g] + side;
        row.push_back({s, data_->length(s)});  // fitted when prepared: at most seq_len + 1
      }
      const int64_t r = 2 * k + side;
      FillRow(row, po, view, tokens + r * T, targets + r * T, positions + r * T, segment_ids + r * T);
    }
  }
}

}  // namespace shard
