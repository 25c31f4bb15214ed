#include "shard/train/synthetic_batch_source.h"

#include <algorithm>

namespace shard {
namespace {

class SyntheticSource final : public BatchSource {
 public:
  SyntheticSource(int64_t global_batch, int64_t seq_len, bool segmented, int rows_per_item)
      : global_batch_(global_batch), seq_len_(seq_len), segmented_(segmented), rows_per_item_(rows_per_item) {}

  StatusOr<GlobalBatch> Plan(int64_t) override {
    const int64_t n = global_batch_ * rows_per_item_ * seq_len_;
    return GlobalBatch{global_batch_, n, n};
  }
  void Fill(int64_t, int64_t count, int32_t* tokens, int32_t* targets, int32_t* positions,
            int32_t* segment_ids) const override {
    for (int64_t i = 0; i < count * rows_per_item_ * seq_len_; ++i) {
      tokens[i] = 0;
      targets[i] = 0;
      positions[i] = static_cast<int32_t>(i % seq_len_);
      if (segmented_) segment_ids[i] = static_cast<int32_t>(i / seq_len_);
    }
  }
  bool segmented() const override { return segmented_; }
  int rows_per_item() const override { return rows_per_item_; }
  // Items [first, first + count) of the batch (a preference job's synthetic
  // reference log-probs are indexed by them).
  std::vector<int64_t> ItemIds(int64_t first, int64_t count) const override {
    std::vector<int64_t> ids;
    for (int64_t i = first; i < first + count; ++i) ids.push_back(i);
    return ids;
  }
  std::string Describe() const override {
    return "synthetic batches of " + std::to_string(global_batch_) + (rows_per_item_ == 2 ? " pairs of 2" : "") +
           " x " + std::to_string(seq_len_) + " tokens (memory simulation, no data)";
  }

 private:
  int64_t global_batch_, seq_len_;
  bool segmented_;
  int rows_per_item_;  // 2: preference pairs (chosen, rejected)
};

}  // namespace

std::unique_ptr<BatchSource> SyntheticBatchSource(const JobConfig& job) {
  return std::make_unique<SyntheticSource>(job.train.global_batch, job.data.seq_len,
                                           job.data.sft() && job.data.packing && !job.preference.enabled(),
                                           RowsPerItem(job));
}

}  // namespace shard
