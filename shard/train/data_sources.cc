// The data sources a job trains on (data_sources.h): token windows, packed
// SFT samples and (pair_source.h) preference pairs, and OpenBatchSource, which
// picks the job's. Kept apart from batch_source.cc (the interface's helpers)
// so the interface includes none of its sources.
#include "shard/train/data_sources.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include "shard/data/prepared_dataset.h"
#include "shard/data/sampler.h"
#include "shard/data/sft_batcher.h"
#include "shard/data/token_windows.h"
#include "shard/train/pair_source.h"

namespace shard {
namespace {

class TokenWindowSource : public BatchSource {
 public:
  TokenWindowSource(TokenWindows windows, const JobConfig& job)
      : windows_(std::move(windows)),
        sampler_(windows_.num_windows(), job.data.shuffle, job.train.seed),
        global_batch_(job.train.global_batch) {}

  StatusOr<GlobalBatch> Plan(int64_t cursor) override {
    cursor_ = cursor;
    const int64_t n = global_batch_ * windows_.seq_len();
    return GlobalBatch{global_batch_, n, n};
  }
  void Fill(int64_t first_row, int64_t count, int32_t* tokens, int32_t* targets, int32_t* positions,
            int32_t*) const override {
    const int64_t T = windows_.seq_len();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t w = sampler_.At(cursor_ + first_row + i);
      windows_.Window(w, tokens + i * T, targets + i * T, positions + i * T);
    }
  }
  bool segmented() const override { return false; }
  std::string Describe() const override {
    return std::to_string(windows_.num_windows()) + " windows of " + std::to_string(windows_.seq_len()) + " tokens";
  }

 private:
  TokenWindows windows_;
  mutable Sampler sampler_;  // caches its epoch permutation; the order is fixed by the seed
  int64_t global_batch_;
  int64_t cursor_ = 0;
};

class SftSource : public BatchSource {
 public:
  SftSource(PreparedDataset data, const JobConfig& job)
      : data_(std::move(data)), sampler_(data_.num_samples(), job.data.shuffle, job.train.seed) {}

  Status Init(const JobConfig& job) {
    SftBatcherOptions o;
    o.global_batch = job.train.global_batch;
    o.packing.seq_len = job.data.seq_len;
    o.packing.packing = job.data.packing;
    o.packing.overlong = job.data.overlong;
    o.packing.pad_id = 0;  // never a target, and attention never reaches it from a sample
    ASSIGN_OR_RETURN(SftBatcher b, SftBatcher::Create(&data_, &sampler_, o));
    batcher_.emplace(std::move(b));
    return OkStatus();
  }

  StatusOr<GlobalBatch> Plan(int64_t cursor) override {
    ASSIGN_OR_RETURN(plan_, batcher_->PlanGlobalBatch(cursor));
    return GlobalBatch{plan_.consumed, plan_.target_tokens, plan_.tokens};
  }
  void Fill(int64_t first_row, int64_t count, int32_t* tokens, int32_t* targets, int32_t* positions,
            int32_t* segment_ids) const override {
    batcher_->FillRows(plan_, first_row, count, tokens, targets, positions, segment_ids);
  }
  bool segmented() const override { return true; }
  std::string Fingerprint() const override {
    const PreparedHeader& h = data_.header();
    const auto& p = batcher_->options().packing;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%016llx/%016llx", static_cast<unsigned long long>(h.source_hash),
                  static_cast<unsigned long long>(h.tokenizer_hash));
    return std::string("sft:") + buf + "/" + h.chat_template + "/" + h.train_on + "/" + std::to_string(h.num_samples) +
           "/seq" + std::to_string(p.seq_len) + (p.packing ? "/packed/" : "/unpacked/") + OverlongName(p.overlong);
  }
  std::string Describe() const override {
    const PreparedHeader& h = data_.header();
    const auto& p = batcher_->options().packing;
    return std::to_string(h.num_samples) + " SFT samples (" + std::to_string(h.num_tokens) + " tokens, " +
           std::to_string(h.num_target_tokens) + " targets; " + h.tokenizer_kind + " tokenizer, " + h.chat_template +
           " template) in rows of " + std::to_string(p.seq_len) + (p.packing ? ", packed" : ", one sample per row");
  }

 private:
  PreparedDataset data_;
  Sampler sampler_;
  std::optional<SftBatcher> batcher_;  // points at data_ and sampler_: this object never moves
  BatchPlan plan_;
};

}  // namespace

StatusOr<std::unique_ptr<BatchSource>> OpenBatchSource(const JobConfig& job, int64_t vocab_size) {
  if (!job.data.sft()) {
    ASSIGN_OR_RETURN(TokenWindows w, TokenWindows::Open(job.data.tokens, job.data.seq_len, vocab_size));
    return std::unique_ptr<BatchSource>(new TokenWindowSource(std::move(w), job));
  }
  const std::string prefix = SftPreparedPrefix(job);
  auto data = PreparedDataset::Open(prefix);
  if (!data.ok()) return data.status().WithContext("data.jsonl " + job.data.jsonl + " prepared as " + prefix);
  Status vocab = data->CheckVocab(vocab_size);
  if (!vocab.ok())
    return vocab.WithContext("data.tokenizer " + job.data.tokenizer + " does not fit the model (vocab_size " +
                             std::to_string(vocab_size) + ")");
  if (data->header().pairs && !job.preference.enabled())
    return InvalidArgument("data.jsonl " + job.data.jsonl + " holds preference pairs (prompt, chosen, rejected); "
                           "they train under a preference: section (method dpo, ipo or orpo), not as SFT samples");
  if (job.preference.enabled()) {
    if (!data->header().pairs)
      return InvalidArgument("data.jsonl " + job.data.jsonl + " holds SFT samples, not preference pairs (prompt, "
                             "chosen, rejected)");
    return OpenPairSource(job, std::move(*data));
  }
  auto source = std::make_unique<SftSource>(std::move(*data), job);
  RETURN_IF_ERROR(source->Init(job));
  return std::unique_ptr<BatchSource>(std::move(source));
}

}  // namespace shard
