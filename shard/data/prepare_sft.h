// prepare-data: SFT JSONL -> a prepared dataset (prepared_dataset.h). A file
// of preference pairs (sft_jsonl.h format preference) becomes a dataset of
// pairs: samples 2i and 2i+1 are pair i's chosen and rejected replies, and a
// bad row or an over-long pair is left out as one.
//
// Rows are parsed and tokenized on several threads in batches and written in
// input order. A bad row (not JSON, neither row format, an unknown role, no
// assistant reply to train on, ...) is an error naming "FILE:LINE" and the
// problem; with bad_rows = skip it is logged (the first few), counted in the
// header and left out. Blank lines are ignored.
//
// Thread-safety: each call is independent; the tokenizer is only read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/data/prepared_dataset.h"
#include "shard/data/tokenizer.h"
#include "shard/spec/data_config.h"

namespace shard {

struct PrepareSftOptions {
  std::string input;                    // JSONL file
  std::string tokenizer = "byte";       // LoadTokenizer spec
  std::string chat_template = "auto";   // auto | hf | hf:NAME | plain | llama2 | llama3 | chatml (chat_format.h)
  int64_t seq_len = 0;                  // recorded, and used to count over-long samples
  TrainOn train_on = TrainOn::kAssistant;
  SftFormat format = SftFormat::kAuto;  // how rows are read (sft_jsonl.h)
  BadRows bad_rows = BadRows::kFail;
  // Preference pairs only (format preference, or auto on a file of pairs):
  // how a pair longer than seq_len + 1 tokens is fitted, here rather than at
  // packing, so every stored pair trains (preference_jsonl.h FitPair).
  Overlong overlong = Overlong::kTruncate;
  std::string out;                      // PREFIX of the prepared files
  int threads = 0;                      // 0: hardware concurrency
  int report_bad_rows = 10;             // skipped rows logged one by one, at most

  Status Validate() const;
};

struct PrepareSftResult {
  PreparedHeader header;
  double seconds = 0;
  std::vector<std::string> bad_rows;  // "FILE:LINE: problem" of the first skipped rows
  int64_t identical_pairs_first_line = 0;  // the line of the first pair whose replies are the same (0: none)
};

// INVALID_ARGUMENT when an output file (PREFIX.tokens/.mask/.index/.json or
// their temp names) resolves to an input: the JSONL or a tokenizer file.
// Validate() calls it, so every entry point refuses before writing anything.
Status CheckOutputsSpareInputs(const PrepareSftOptions& o);

StatusOr<PrepareSftResult> PrepareSftData(const PrepareSftOptions& o);
// With a tokenizer already loaded (o.tokenizer is then only recorded).
StatusOr<PrepareSftResult> PrepareSftData(const PrepareSftOptions& o, const Tokenizer& tok);

// True when o.out holds a dataset prepared from the same input bytes with the
// same tokenizer, template, train_on and seq_len: a job can reuse it.
StatusOr<bool> PreparedIsCurrent(const PrepareSftOptions& o, const Tokenizer& tok);

// What a job does once, on one rank, before every rank opens o.out: prepare
// unless PreparedIsCurrent. Returns true when it (re)wrote the dataset.
StatusOr<bool> EnsurePrepared(const PrepareSftOptions& o);

}  // namespace shard
