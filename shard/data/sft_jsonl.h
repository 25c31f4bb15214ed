// One SFT JSONL row, in one of four formats (other keys are ignored, so
// exported datasets with ids or metadata load as they are):
//
//   messages         {"messages": [{"role": ..., "content": ...}, ...]}
//   prompt_response  {"prompt": ..., "response": ...} (optionally "system")
//   alpaca           {"instruction": ..., "input": ..., "output": ...} (input
//                    optional; a non-empty input follows the instruction after
//                    a blank line; optionally "system")
//   sharegpt         {"conversations": [{"from": "human"|"gpt"|"system", "value": ...}]}
//                    ("user"/"assistant" are accepted as from values too)
//   preference       {"prompt": ..., "chosen": ..., "rejected": ...}: TRL's
//                    pairs, detected here and read by preference_jsonl.h
//                    (ParseSftRow refuses them: a pair is not one conversation)
//
// With format auto a file's format is that of its first row, and a row in
// another format is refused (mixed files are usually a concatenation mistake);
// messages and prompt_response rows may share a file, as they always could.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shard/common/status.h"
#include "shard/data/chat_template.h"

namespace shard {

// The format of one row, by its keys (auto is never returned). INVALID_ARGUMENT
// for a line that is not a JSON object or matches no format.
StatusOr<SftFormat> DetectSftFormat(std::string_view line);

// INVALID_ARGUMENT says what is wrong with the row (the caller adds the line
// number): not JSON, not an object, not the expected format, a message without
// a string role or content, an unknown role, an empty conversation.
// `also`: a second format accepted beside `format` (auto: none).
StatusOr<std::vector<Message>> ParseSftRow(std::string_view line, SftFormat format = SftFormat::kAuto,
                                           SftFormat also = SftFormat::kAuto);

// The pieces every JSONL row reader shares (preference_jsonl.h too): a line as
// a JSON object (depth-checked; INVALID_ARGUMENT says what is wrong), and a
// list of {"role", "content"} messages under `key` (errors name key[i]).
StatusOr<nlohmann::json> ParseJsonlObject(std::string_view line);
StatusOr<std::vector<Message>> ParseMessageList(const nlohmann::json& list, const std::string& key);

}  // namespace shard
