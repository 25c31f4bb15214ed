// shardctl subcommands that work offline, without a coordinator.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/data_config.h"

namespace shardctl {

struct EvalOptions {
  std::string model;   // HF folder or committed checkpoint step folder
  std::string adapter; // a PEFT LoRA folder merged into the model first ("" = none)
  std::string tokens;  // raw uint32 token file (windows of seq_len + 1)
  int64_t seq_len = 0;
  int64_t batch = 8;
  int64_t max_windows = 0;  // 0 = all
  // SFT data instead of tokens: a prepared PREFIX, or a .jsonl prepared on the
  // fly (into a temporary directory) with tokenizer/template/train_on.
  std::string data;
  std::string tokenizer;                // "": the model folder's tokenizer files, else byte
  std::string chat_template = "auto";  // auto | hf | hf:NAME | plain | llama2 | llama3 | chatml
  shard::TrainOn train_on = shard::TrainOn::kAssistant;
  int64_t max_samples = 0;  // 0 = all
  int64_t show = 0;         // print the first N greedy answers
  std::string device = "auto";
  bool json = false;
};
// --tokens: mean loss over windows; --data: loss and exact match (eval_sft.cc).
shard::Status RunEval(const EvalOptions& o);
shard::Status RunEvalSft(const EvalOptions& o);

// generate_command.cc. Exactly one of prompt_text, messages, prompt.
struct GenerateOptions {
  std::string model;
  std::string adapter;          // --adapter: a PEFT LoRA folder merged into the model first ("" = none)
  std::string prompt_text;      // --prompt TEXT (bos + the text's tokens)
  std::string messages;         // --messages FILE.json, rendered by the model's chat template
  std::vector<int32_t> prompt;  // --prompt-tokens 1,2,3
  std::string tokenizer;        // --tokenizer; default: the model folder's tokenizer files
  int64_t max_new = 64;
  double temperature = 0.0;  // 0 = greedy
  double top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::string device = "auto";
  bool json = false;
};
shard::Status RunGenerate(const GenerateOptions& o);

struct ExportOptions {
  std::string step_dir;  // a committed step directory
  std::string out;
  std::string dtype = "fp32";
  int64_t max_file_bytes = int64_t{5} << 30;
  std::string tokenizer;  // "" / byte: no tokenizer files (shard/data/tokenizer_export.h)
  std::string chat_template = "auto";  // whose end-of-turn token generation_config.json stops at too
};
shard::Status RunExport(const ExportOptions& o);

struct CheckpointsOptions {
  std::string dir;  // "<checkpoint.dir>/<job>"
  bool json = false;
};
shard::Status RunCheckpoints(const CheckpointsOptions& o);

struct LaunchOptions {
  std::string job_file;
  std::vector<std::string> sets;
  std::string worker_bin;      // default: next to shardctl, $SHARDD_WORKER_BIN, or PATH
  std::string metrics_prefix;  // each rank appends metrics to PREFIX<rank>.jsonl
};
shard::Status RunLaunch(const LaunchOptions& o);

// "1,2,3" -> {1,2,3}; names the bad element.
shard::StatusOr<std::vector<int32_t>> ParseTokenList(const std::string& text);

}  // namespace shardctl
