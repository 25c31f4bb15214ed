// shardctl prepare-data: SFT JSONL -> a prepared dataset (shard/data/prepare_sft.h).
#pragma once

#include <cstdint>
#include <string>

#include "shard/common/status.h"
#include "shard/spec/data_config.h"

namespace shardctl {

struct PrepareDataOptions {
  std::string input;                    // --input F.jsonl
  std::string tokenizer = "byte";       // --tokenizer byte | tokenizer.json | .model | folder
  std::string chat_template = "auto";   // --template auto | hf | hf:NAME | plain | llama2 | llama3 | chatml
  int64_t seq_len = 0;                  // --seq-len N
  std::string out;                      // --out PREFIX
  shard::TrainOn train_on = shard::TrainOn::kAssistant;  // --train-on
  shard::SftFormat format = shard::SftFormat::kAuto;     // --format
  shard::BadRows bad_rows = shard::BadRows::kFail;       // --bad-rows
  int threads = 0;                      // --threads (0 = all cores)
  bool json = false;                    // --json: print the header
};

// Prepares the dataset and prints a one-line summary (or the header as JSON).
shard::Status RunPrepareData(const PrepareDataOptions& o);

}  // namespace shardctl
