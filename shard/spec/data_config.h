// The job file's data: section. Exactly one source: a raw token file
// (`tokens`, pretraining on windows) or SFT JSONL (`jsonl`, prepared into a
// PreparedDataset once per job and packed into rows).
#pragma once

#include <cstdint>
#include <string>

#include "shard/common/status.h"

namespace shard {

// The named chat templates (shard/data/chat_template.h renders them).
inline constexpr const char* kNamedChatTemplates[] = {"plain", "llama2", "llama3", "chatml"};
// True for the spellings data.template accepts (shard/data/chat_format.h):
// auto, hf, hf:NAME or a named template. A syntax check; no files are read.
bool IsChatFormatSpec(const std::string& spec);
// Ids of the built-in byte tokenizer (256 bytes + its specials;
// shard/data/byte_tokenizer.h checks it).
inline constexpr int64_t kByteTokenizerVocabSize = 265;

struct DataConfig {
  // A raw little-endian uint32 token file, cut into windows of seq_len + 1
  // tokens that start every seq_len tokens (each token is a target once).
  std::string tokens;
  // SFT rows ({"messages": [...]} or {"prompt", "response"}), tokenized with
  // `tokenizer` through the chat template into `prepared` (default
  // <checkpoint.dir>/<job>/data/sft) by rank 0, reused while unchanged.
  std::string jsonl;
  std::string prepared;                // PREFIX of the prepared dataset ("" = the default above)
  // byte | tokenizer.json | SentencePiece .model | folder. Unset: the model's
  // own (model.from_hf's folder), or byte for a preset (ResolveTokenizer).
  std::string tokenizer;
  bool tokenizer_from_model = false;   // set by ResolveTokenizer: the job file did not name one
  // auto | hf | hf:NAME | plain | llama2 | llama3 | chatml (YAML key: template;
  // shard/data/chat_format.h). auto: the tokenizer folder's chat_template, else plain.
  std::string chat_template = "auto";
  std::string format = "auto";         // auto | messages | prompt_response | alpaca | sharegpt
  bool packing = true;                 // several samples per row (no attention across them)
  std::string train_on = "assistant";  // assistant | all
  std::string bad_rows = "fail";       // fail | skip
  std::string overlong = "truncate";   // truncate | drop: samples longer than seq_len + 1 tokens
  int64_t seq_len = 0;
  bool shuffle = true;  // a seeded permutation per epoch (seed: train.seed)

  bool sft() const { return !jsonl.empty(); }
  Status Validate() const;
  // Fills an unset tokenizer from the model: model.from_hf's folder when it
  // holds tokenizer.json or tokenizer.model (INVALID_ARGUMENT when that folder
  // exists without either), else byte. Marks it tokenizer_from_model.
  Status ResolveTokenizer(const std::string& from_hf);
  // The byte tokenizer chosen by default (not named) on a model whose
  // vocabulary is not the byte tokenizer's is refused: its ids would train a
  // model that cannot read them. data.tokenizer: byte asks for it explicitly.
  Status CheckTokenizerFitsModel(int64_t model_vocab_size) const;
};

}  // namespace shard
