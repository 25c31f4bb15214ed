// generation_config.json as transformers reads it, the part shardd uses: the
// ids generation stops at (eos_token_id: an id, a list of ids, or null).
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shard {

// The eos ids of generation_config.json text (`path` names it in errors), in
// order. Every id must be an integer in [0, vocab_size): an id past the
// vocabulary, negative, or past int32 is refused naming the file and the id,
// never truncated to another token. vocab_size <= 0: unknown, only the int32
// bound. Absent or null: none. Not valid JSON (the parser's reason: a number
// overflow for 1e400) or not an object: INVALID_ARGUMENT naming the file.
StatusOr<std::vector<int32_t>> GenerationEosIds(const std::string& text, const std::string& path, int64_t vocab_size);

}  // namespace shard
