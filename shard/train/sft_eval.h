// Evaluation of a model on a prepared SFT dataset: the mean cross-entropy per
// target token (each sample alone in its row, cut to seq_len + 1 tokens) and
// the exact-match accuracy of greedy answers.
//
// A sample's answer is its last run of target tokens (the final assistant
// reply and its end marker, e.g. EOS); its prompt is every token before it.
// Greedy decoding from the prompt for as many tokens as the answer holds must
// reproduce the answer's token ids exactly. Decoding runs several samples side
// by side, one row each (causal attention: what follows a row's last real
// token cannot change its logits), and recomputes the prefix per token (no KV
// cache): fine for the short answers this is meant for.
//
// Thread-safety: one thread (the model owns scratch buffers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/data/packing.h"
#include "shard/data/prepared_dataset.h"
#include "shard/model/llama_model.h"

namespace shard {

// [begin, end): the last run of mask bits in tokens [1, length). Empty
// (begin == end) when the sample has no target.
struct AnswerSpan {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
AnswerSpan LastAnswerSpan(const SampleView& v);

struct SftEvalOptions {
  int64_t seq_len = 0;      // positions per row; 0: the longest sample (capped by the model's context)
  int64_t batch = 16;       // rows per forward pass
  int64_t max_samples = 0;  // evaluate samples [0, max_samples); 0 = all
  int64_t keep_answers = 0; // keep the first N samples' prompt/answer/greedy ids for display
  bool exact_match = true;  // also decode the greedy answers
  // Several ranks scoring together through sharded weights (the trainer's
  // eval:): rank r takes rows [r*batch, (r+1)*batch) of each run of
  // batch*world samples. Every rank makes the same sequence of forward passes
  // (a placeholder row where it has no sample left, and each decode step runs
  // as long as the longest answer of the whole run), because each pass
  // gathers the units collectively. The result's sums are this rank's share;
  // the caller adds them over the ranks.
  int rank = 0;
  int world = 1;
  // LoRA adapters to score through (a peft: job's, LoraAdapters::binding()):
  // the model is the base in `params` plus these adapters, as trained, in
  // eval mode (forward only: no dropout, no gradients). Null: `params` alone.
  // Must outlive the call.
  const LoraBinding* lora = nullptr;
};

struct SftAnswer {
  int64_t sample = 0;
  std::vector<int32_t> prompt, expected, greedy;
  bool match = false;
};

struct SftEvalResult {
  double loss = 0;             // mean cross-entropy per target token
  double loss_sum = 0;         // summed over the target tokens
  int64_t target_tokens = 0;   // targets the loss averages over
  int64_t samples = 0;         // samples evaluated
  int64_t scored = 0;          // samples with an answer that fits seq_len (exact match is over these)
  int64_t exact = 0;           // of which the greedy answer matched
  int64_t seq_len = 0;         // the row length used
  double exact_match() const { return scored ? static_cast<double>(exact) / static_cast<double>(scored) : 0.0; }
  std::vector<SftAnswer> answers;  // the first keep_answers samples
};

// `params` holds the model's weights for `config` on `backend`.
StatusOr<SftEvalResult> EvaluateSft(const LlamaConfig& config, Backend* backend, UnitAccess& params,
                                    const PreparedDataset& data, const SftEvalOptions& options);

}  // namespace shard
