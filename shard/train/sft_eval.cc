#include "shard/train/sft_eval.h"

#include <algorithm>
#include <memory>

namespace shard {

AnswerSpan LastAnswerSpan(const SampleView& v) {
  int64_t end = v.length;
  while (end > 1 && !v.mask[end - 1]) --end;
  if (end <= 1) return {};
  int64_t begin = end - 1;
  while (begin > 1 && v.mask[begin - 1]) --begin;
  return {begin, end};
}

namespace {

// Host staging and device copies of one batch of rows.
struct Rows {
  std::vector<int32_t> tok, tgt, pos;
  DeviceBuffer d_tok, d_tgt, d_pos;
  static StatusOr<Rows> Create(Backend* backend, int64_t n) {
    Rows r;
    r.tok.resize(n);
    r.tgt.resize(n);
    r.pos.resize(n);
    ASSIGN_OR_RETURN(r.d_tok, DeviceBuffer::Create(backend, n));
    ASSIGN_OR_RETURN(r.d_tgt, DeviceBuffer::Create(backend, n));
    ASSIGN_OR_RETURN(r.d_pos, DeviceBuffer::Create(backend, n));
    return r;
  }
  void Upload(Backend* backend, int64_t n, bool targets) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(int32_t);
    backend->CopyToDevice(d_tok.data(), tok.data(), bytes);
    backend->CopyToDevice(d_pos.data(), pos.data(), bytes);
    if (targets) backend->CopyToDevice(d_tgt.data(), tgt.data(), bytes);
  }
};

}  // namespace

namespace {

// This rank's rows of the run of batch*world items starting at g0: [first, first + count).
struct Share {
  int64_t first = 0, count = 0;
};
Share MyShare(int64_t g0, int64_t total, int64_t B, const SftEvalOptions& o) {
  const int64_t first = g0 + static_cast<int64_t>(o.rank) * B;
  return {first, std::max<int64_t>(0, std::min(B, total - first))};
}

// One evaluation: the model and row buffers sized once, the loss pass, then
// the greedy answers in runs of B samples per rank.
class SftEvaluator {
 public:
  SftEvaluator(const LlamaConfig& config, Backend* backend, UnitAccess& params, const PreparedDataset& data,
               const SftEvalOptions& o, int64_t n, int64_t T, int64_t B)
      : config_(config), backend_(backend), params_(params), data_(data), o_(o), n_(n), T_(T), B_(B),
        run_(B * o.world) {}

  Status Init() {
    ModelOptions mo;
    mo.max_batch = B_;
    mo.max_seq = T_;
    ASSIGN_OR_RETURN(model_, LlamaModel::Create(config_, backend_, mo));
    if (o_.lora) RETURN_IF_ERROR(BindAdapters(*o_.lora));
    ASSIGN_OR_RETURN(rows_, Rows::Create(backend_, B_ * T_));
    return OkStatus();
  }
  Status ScoreLoss(SftEvalResult* res);
  Status ExactMatch(SftEvalResult* res);

 private:
  // One run of greedy decoding: nb sequences grown by up to `steps` tokens.
  Status Decode(int64_t steps, const std::vector<AnswerSpan>& spans, std::vector<std::vector<int32_t>>* seqs);
  // Compares the decoded answers of the run with the samples' own.
  void Judge(const std::vector<int64_t>& samples, const std::vector<AnswerSpan>& spans,
             const std::vector<std::vector<int32_t>>& seqs, SftEvalResult* res) const;
  // The trainer's adapters, read in place, bound without dropout or gradients:
  // the forward-only passes here never apply dropout, and without it the model
  // allocates no dropout scratch.
  Status BindAdapters(const LoraBinding& trained) {
    lora_ = trained;
    lora_.dropout = 0.0f;
    lora_.grads.assign(lora_.grads.size(), nullptr);
    return model_->SetLora(&lora_).WithContext("sft eval: binding the LoRA adapters");
  }

  const LlamaConfig& config_;
  Backend* backend_;
  UnitAccess& params_;
  const PreparedDataset& data_;
  const SftEvalOptions& o_;
  const int64_t n_, T_, B_, run_;  // samples; row length; rows per pass; items per collective pass
  std::unique_ptr<LlamaModel> model_;
  LoraBinding lora_;  // the bound copy of o_.lora (when set)
  Rows rows_;
};

// Loss: one sample per row, cut to T + 1 tokens; the padding after it is
// never a target and (causal attention) never seen by the sample.
Status SftEvaluator::ScoreLoss(SftEvalResult* res) {
  PackingOptions po;
  po.seq_len = T_;
  po.packing = false;
  auto view = [this](int64_t s) { return data_.sample(s); };
  std::vector<int32_t> seg(B_ * T_);
  for (int64_t g0 = 0; g0 < n_; g0 += run_) {
    const Share my = MyShare(g0, n_, B_, o_);
    res->samples += my.count;
    const int64_t nb = std::max<int64_t>(my.count, 1);  // a placeholder row (no targets) keeps the ranks in step
    for (int64_t i = 0; i < nb; ++i) {
      std::vector<PackedSpan> row;
      if (i < my.count) {
        const int64_t s = my.first + i, take = std::min(data_.length(s), T_ + 1);
        if (SpanTargets(data_.sample(s), take) > 0) row.push_back({s, take});
        res->target_tokens += SpanTargets(data_.sample(s), take);
      }
      FillRow(row, po, view, &rows_.tok[i * T_], &rows_.tgt[i * T_], &rows_.pos[i * T_], &seg[i * T_]);
    }
    rows_.Upload(backend_, nb * T_, /*targets=*/true);
    DeviceBatch b{nb, T_, rows_.d_tok.as_int(), rows_.d_tgt.as_int(), rows_.d_pos.as_int(), nullptr};
    ASSIGN_OR_RETURN(double l, model_->ForwardLoss(b, params_));
    res->loss_sum += l;
  }
  res->loss = res->target_tokens > 0 ? res->loss_sum / static_cast<double>(res->target_tokens) : 0.0;
  return OkStatus();
}

// Greedy answers, B samples side by side. Answer token j is predicted from
// the prompt plus j generated tokens: the longest input is end - 1 tokens.
Status SftEvaluator::ExactMatch(SftEvalResult* res) {
  std::vector<int64_t> todo;
  for (int64_t s = 0; s < n_; ++s) {
    const AnswerSpan a = LastAnswerSpan(data_.sample(s));
    if (a.size() > 0 && a.end - 1 <= T_) todo.push_back(s);
  }
  const int64_t total = static_cast<int64_t>(todo.size());
  for (int64_t g0 = 0; g0 < total; g0 += run_) {
    const Share my = MyShare(g0, total, B_, o_);
    res->scored += my.count;
    const int64_t nb = my.count;
    std::vector<std::vector<int32_t>> seqs(nb);
    std::vector<AnswerSpan> spans(nb);
    std::vector<int64_t> samples(todo.begin() + my.first, todo.begin() + my.first + nb);
    // Decode steps: the longest answer of the whole run, the same on every rank.
    int64_t longest_answer = 0;
    for (int64_t s = g0; s < std::min(total, g0 + run_); ++s)
      longest_answer = std::max(longest_answer, LastAnswerSpan(data_.sample(todo[s])).size());
    for (int64_t i = 0; i < nb; ++i) {
      const SampleView v = data_.sample(samples[i]);
      spans[i] = LastAnswerSpan(v);
      seqs[i].assign(v.tokens, v.tokens + spans[i].begin);
    }
    RETURN_IF_ERROR(Decode(longest_answer, spans, &seqs));
    Judge(samples, spans, seqs, res);
  }
  return OkStatus();
}

Status SftEvaluator::Decode(int64_t steps, const std::vector<AnswerSpan>& spans,
                            std::vector<std::vector<int32_t>>* seqs_out) {
  std::vector<std::vector<int32_t>>& seqs = *seqs_out;
  const int64_t nb = static_cast<int64_t>(seqs.size());
  std::vector<float> logits_row(config_.vocab_size);
  for (int64_t k = 0; k < steps; ++k) {
    int64_t S = 1;
    for (int64_t i = 0; i < nb; ++i) S = std::max<int64_t>(S, static_cast<int64_t>(seqs[i].size()));
    const int64_t rows_now = std::max<int64_t>(nb, 1);
    for (int64_t i = 0; i < rows_now; ++i) {
      for (int64_t t = 0; t < S; ++t) {
        rows_.tok[i * S + t] = i < nb && t < static_cast<int64_t>(seqs[i].size()) ? seqs[i][t] : 0;
        rows_.pos[i * S + t] = static_cast<int32_t>(t);
      }
    }
    rows_.Upload(backend_, rows_now * S, /*targets=*/false);
    DeviceBatch b{rows_now, S, rows_.d_tok.as_int(), nullptr, rows_.d_pos.as_int(), nullptr};
    // Only each unfinished sequence's last position: at most nb <= B rows of logits.
    std::vector<int64_t> want, owner;
    for (int64_t i = 0; i < nb; ++i) {
      if (k >= spans[i].size()) continue;  // this answer is complete
      want.push_back(i * S + static_cast<int64_t>(seqs[i].size()) - 1);
      owner.push_back(i);
    }
    if (want.empty()) want.push_back(0);  // nothing left here: a placeholder pass keeps the ranks in step
    ASSIGN_OR_RETURN(const float* logits, model_->ForwardLogits(b, params_, want));
    for (size_t j = 0; j < owner.size(); ++j) {
      const int64_t i = owner[j];
      backend_->CopyToHost(logits_row.data(), logits + static_cast<int64_t>(j) * config_.vocab_size,
                           logits_row.size() * sizeof(float));
      seqs[i].push_back(
          static_cast<int32_t>(std::max_element(logits_row.begin(), logits_row.end()) - logits_row.begin()));
    }
  }
  return OkStatus();
}

void SftEvaluator::Judge(const std::vector<int64_t>& samples, const std::vector<AnswerSpan>& spans,
                         const std::vector<std::vector<int32_t>>& seqs, SftEvalResult* res) const {
  for (size_t i = 0; i < samples.size(); ++i) {
    const int64_t sample = samples[i];
    const SampleView v = data_.sample(sample);
    const AnswerSpan& a = spans[i];
    const bool match = std::equal(seqs[i].begin() + a.begin, seqs[i].end(), v.tokens + a.begin,
                                  [](int32_t x, uint32_t y) { return static_cast<uint32_t>(x) == y; });
    res->exact += match ? 1 : 0;
    if (sample < o_.keep_answers) {
      SftAnswer ans;
      ans.sample = sample;
      ans.prompt.assign(seqs[i].begin(), seqs[i].begin() + a.begin);
      ans.expected.assign(v.tokens + a.begin, v.tokens + a.end);
      ans.greedy.assign(seqs[i].begin() + a.begin, seqs[i].end());
      ans.match = match;
      res->answers.push_back(std::move(ans));
    }
  }
}

}  // namespace

StatusOr<SftEvalResult> EvaluateSft(const LlamaConfig& config, Backend* backend, UnitAccess& params,
                                    const PreparedDataset& data, const SftEvalOptions& o) {
  if (o.batch <= 0) return InvalidArgument("sft eval: batch must be > 0");
  if (o.seq_len < 0) return InvalidArgument("sft eval: seq_len must be >= 0");
  if (o.world <= 0 || o.rank < 0 || o.rank >= o.world) return InvalidArgument("sft eval: rank outside the world");
  RETURN_IF_ERROR(data.CheckVocab(config.vocab_size));
  SftEvalResult res;
  const int64_t n = o.max_samples > 0 ? std::min(o.max_samples, data.num_samples()) : data.num_samples();
  if (n == 0) return res;
  int64_t longest = 2;
  for (int64_t s = 0; s < n; ++s) longest = std::max(longest, data.length(s));
  const int64_t T = std::min(o.seq_len > 0 ? o.seq_len : longest - 1, config.max_position_embeddings);
  res.seq_len = T;
  const int64_t B = std::min(o.batch, std::max<int64_t>(1, (n + o.world - 1) / o.world));
  SftEvaluator eval(config, backend, params, data, o, n, T, B);
  RETURN_IF_ERROR(eval.Init());
  RETURN_IF_ERROR(eval.ScoreLoss(&res));
  if (!o.exact_match) return res;
  RETURN_IF_ERROR(eval.ExactMatch(&res));
  return res;
}

}  // namespace shard
