// The job file's data: section. Exactly one source: a raw token file
// (`tokens`, pretraining on windows) or SFT JSONL (`jsonl`, prepared into a
// PreparedDataset once per job and packed into rows).
#pragma once

#include <string>

#include "shard/common/status.h"

namespace shard {

struct DataConfig {
  // A raw little-endian uint32 token file, cut into windows of seq_len + 1
  // tokens that start every seq_len tokens (each token is a target once).
  std::string tokens;
  // SFT rows ({"messages": [...]} or {"prompt", "response"}), tokenized with
  // `tokenizer` through the chat template into `prepared` (default
  // <checkpoint.dir>/<job>/data/sft) by rank 0, reused while unchanged.
  std::string jsonl;
  std::string prepared;                // PREFIX of the prepared dataset ("" = the default above)
  std::string tokenizer = "byte";      // byte | tokenizer.json | SentencePiece .model | folder
  std::string chat_template = "plain"; // plain | llama2 | llama3 | chatml  (YAML key: template)
  bool packing = true;                 // several samples per row (no attention across them)
  std::string train_on = "assistant";  // assistant | all
  std::string bad_rows = "fail";       // fail | skip
  std::string overlong = "truncate";   // truncate | drop: samples longer than seq_len + 1 tokens
  int64_t seq_len = 0;
  bool shuffle = true;  // a seeded permutation per epoch (seed: train.seed)

  bool sft() const { return !jsonl.empty(); }
  Status Validate() const;
};

}  // namespace shard
