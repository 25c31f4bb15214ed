// One SFT JSONL row: {"messages": [{"role": ..., "content": ...}, ...]} or
// {"prompt": ..., "response": ...} (optionally with "system"). Other keys are
// ignored, so exported datasets with ids or metadata load as they are.
//
// Thread-safety: pure function.
#pragma once

#include <string_view>
#include <vector>

#include "shard/common/status.h"
#include "shard/data/chat_template.h"

namespace shard {

// INVALID_ARGUMENT says what is wrong with the row (the caller adds the line
// number): not JSON, not an object, neither format, a message without a string
// role or content, an unknown role, an empty conversation.
StatusOr<std::vector<Message>> ParseSftRow(std::string_view line);

}  // namespace shard
