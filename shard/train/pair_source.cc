#include "shard/train/pair_source.h"

#include <cstdio>
#include <optional>

#include "shard/data/pair_batcher.h"
#include "shard/data/sampler.h"

namespace shard {
namespace {

class PairSource : public BatchSource {
 public:
  PairSource(PreparedDataset data, const JobConfig& job)
      : data_(std::move(data)), sampler_(data_.header().num_pairs(), job.data.shuffle, job.train.seed) {}

  Status Init(const JobConfig& job) {
    PairBatcherOptions o;
    o.global_batch = job.train.global_batch;
    o.seq_len = job.data.seq_len;
    ASSIGN_OR_RETURN(PairBatcher b, PairBatcher::Create(&data_, &sampler_, o));
    batcher_.emplace(std::move(b));
    return OkStatus();
  }

  StatusOr<GlobalBatch> Plan(int64_t cursor) override {
    plan_ = batcher_->PlanGlobalBatch(cursor);
    return GlobalBatch{plan_.consumed, plan_.target_tokens, plan_.tokens};
  }
  void Fill(int64_t first_pair, int64_t count, int32_t* tokens, int32_t* targets, int32_t* positions,
            int32_t* segment_ids) const override {
    batcher_->FillPairs(plan_, first_pair, count, tokens, targets, positions, segment_ids);
  }
  bool segmented() const override { return false; }  // one reply per row, padding after it
  int rows_per_item() const override { return 2; }
  std::vector<int64_t> ItemIds(int64_t first, int64_t count) const override {
    std::vector<int64_t> ids;
    for (int64_t i = first; i < first + count && i < static_cast<int64_t>(plan_.pairs.size()); ++i)
      ids.push_back(plan_.pairs[i]);
    return ids;
  }
  std::string Fingerprint() const override { return PairsFingerprint(data_.header()); }
  std::string Describe() const override {
    const PreparedHeader& h = data_.header();
    return std::to_string(h.num_pairs()) + " preference pairs (" + std::to_string(h.num_tokens) + " tokens, " +
           std::to_string(h.num_target_tokens) + " targets; " + h.tokenizer_kind + " tokenizer, " + h.chat_template +
           " template), one reply per row of " + std::to_string(h.seq_len);
  }

 private:
  PreparedDataset data_;
  Sampler sampler_;
  std::optional<PairBatcher> batcher_;  // points at data_ and sampler_: this object never moves
  PairPlan plan_;
};

}  // namespace

std::string PairsFingerprint(const PreparedHeader& h) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%016llx/%016llx", static_cast<unsigned long long>(h.source_hash),
                static_cast<unsigned long long>(h.tokenizer_hash));
  return std::string("pairs:") + buf + "/" + h.chat_template + "/" + std::to_string(h.num_pairs()) + "/seq" +
         std::to_string(h.seq_len) + "/" + h.overlong;
}

StatusOr<std::unique_ptr<BatchSource>> OpenPairSource(const JobConfig& job, PreparedDataset data) {
  auto source = std::make_unique<PairSource>(std::move(data), job);
  RETURN_IF_ERROR(source->Init(job));
  return std::unique_ptr<BatchSource>(std::move(source));
}

}  // namespace shard
