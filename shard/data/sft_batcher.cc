#include "shard/data/sft_batcher.h"

namespace shard {

StatusOr<SftBatcher> SftBatcher::Create(const PreparedDataset* data, Sampler* sampler, const SftBatcherOptions& o) {
  if (o.global_batch <= 0) return InvalidArgument("SftBatcher: global_batch must be > 0");
  if (o.packing.seq_len <= 0) return InvalidArgument("SftBatcher: seq_len must be > 0");
  if (sampler->num_samples() != data->num_samples())
    return InvalidArgument("SftBatcher: the sampler ranges over " + std::to_string(sampler->num_samples()) +
                           " samples, the dataset has " + std::to_string(data->num_samples()));
  return SftBatcher(data, sampler, o);
}

StatusOr<BatchPlan> SftBatcher::PlanGlobalBatch(int64_t cursor) {
  return PlanBatch(
      cursor, options_.global_batch, options_.packing, data_->num_samples(),
      [this](int64_t pos) { return sampler_->At(pos); }, [this](int64_t s) { return data_->sample(s); });
}

void SftBatcher::FillRows(const BatchPlan& plan, int64_t first_row, int64_t count, int32_t* tokens, int32_t* targets,
                          int32_t* positions, int32_t* segment_ids) const {
  static const std::vector<PackedSpan> kEmpty;
  const int64_t T = options_.packing.seq_len;
  auto view = [this](int64_t s) { return data_->sample(s); };
  for (int64_t r = 0; r < count; ++r) {
    const int64_t g = first_row + r;
    const auto& row = g >= 0 && g < static_cast<int64_t>(plan.rows.size()) ? plan.rows[g] : kEmpty;
    FillRow(row, options_.packing, view, tokens + r * T, targets + r * T, positions + r * T, segment_ids + r * T);
  }
}

}  // namespace shard
