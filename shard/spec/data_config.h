// The job file's data: section. Exactly one source: a raw token file
// (`tokens`, pretraining on windows) or SFT JSONL (`jsonl`, prepared into a
// PreparedDataset once per job and packed into rows).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shard/common/status.h"
#include "shard/spec/enum_names.h"

namespace shard {

// data.train_on: which tokens are targets (assistant turns, or every token).
enum class TrainOn { kAssistant, kAll };
inline constexpr EnumName<TrainOn> kTrainOnNames[] = {{TrainOn::kAssistant, "assistant"}, {TrainOn::kAll, "all"}};
inline const char* TrainOnName(TrainOn t) { return EnumToName(kTrainOnNames, t); }
inline StatusOr<TrainOn> ParseTrainOn(std::string_view s) { return ParseEnum(kTrainOnNames, s); }

// data.format: how a JSONL row is read (auto: by the first row's keys).
// preference: TRL's pairs ({"prompt", "chosen", "rejected"}), for a job with a
// preference: section (shard/data/preference_jsonl.h).
enum class SftFormat { kAuto, kMessages, kPromptResponse, kAlpaca, kShareGpt, kPreference };
inline constexpr EnumName<SftFormat> kSftFormatNames[] = {{SftFormat::kAuto, "auto"},
                                                          {SftFormat::kMessages, "messages"},
                                                          {SftFormat::kPromptResponse, "prompt_response"},
                                                          {SftFormat::kAlpaca, "alpaca"},
                                                          {SftFormat::kShareGpt, "sharegpt"},
                                                          {SftFormat::kPreference, "preference"}};
inline const char* SftFormatName(SftFormat f) { return EnumToName(kSftFormatNames, f); }
inline StatusOr<SftFormat> ParseSftFormat(std::string_view s) { return ParseEnum(kSftFormatNames, s); }

// data.bad_rows: a malformed row fails preparation, or is skipped (and counted).
enum class BadRows { kFail, kSkip };
inline constexpr EnumName<BadRows> kBadRowsNames[] = {{BadRows::kFail, "fail"}, {BadRows::kSkip, "skip"}};
inline const char* BadRowsName(BadRows b) { return EnumToName(kBadRowsNames, b); }
inline StatusOr<BadRows> ParseBadRows(std::string_view s) { return ParseEnum(kBadRowsNames, s); }

// data.overlong: a sample longer than seq_len + 1 tokens is cut, or dropped.
enum class Overlong { kTruncate, kDrop };
inline constexpr EnumName<Overlong> kOverlongNames[] = {{Overlong::kTruncate, "truncate"}, {Overlong::kDrop, "drop"}};
inline const char* OverlongName(Overlong o) { return EnumToName(kOverlongNames, o); }
inline StatusOr<Overlong> ParseOverlong(std::string_view s) { return ParseEnum(kOverlongNames, s); }

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
  SftFormat format = SftFormat::kAuto;
  bool packing = true;                 // several samples per row (no attention across them)
  TrainOn train_on = TrainOn::kAssistant;
  BadRows bad_rows = BadRows::kFail;
  Overlong overlong = Overlong::kTruncate;
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
