#include "shard/train/synthetic_batch_source.h"

#include <algorithm>

namespace shard {
namespace {

class SyntheticSource final : public BatchSource {
 public:
  SyntheticSource(int64_t global_batch, int64_t seq_len, bool segmented)
      : global_batch_(global_batch), seq_len_(seq_len), segmented_(segmented) {}

  StatusOr<GlobalBatch> Plan(int64_t) override {
    const int64_t n = global_batch_ * seq_len_;
    return GlobalBatch{global_batch_, n, n};
  }
  void Fill(int64_t, int64_t count, int32_t* tokens, int32_t* targets, int32_t* positions,
            int32_t* segment_ids) const override {
    for (int64_t i = 0; i < count * seq_len_; ++i) {
      tokens[i] = 0;
      targets[i] = 0;
      positions[i] = static_cast<int32_t>(i % seq_len_);
      if (segmented_) segment_ids[i] = static_cast<int32_t>(i / seq_len_);
    }
  }
  bool segmented() const override { return segmented_; }
  std::string Describe() const override {
    return "synthetic batches of " + std::to_string(global_batch_) + " x " + std::to_string(seq_len_) +
           " tokens (memory simulation, no data)";
  }

 private:
  int64_t global_batch_, seq_len_;
  bool segmented_;
};

}  // namespace

std::unique_ptr<BatchSource> SyntheticBatchSource(const JobConfig& job) {
  return std::make_unique<SyntheticSource>(job.train.global_batch, job.data.seq_len, job.data.sft() && job.data.packing);
}

}  // namespace shard
