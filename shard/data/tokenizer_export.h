// The tokenizer half of an exported HF folder: the tokenizer folder's files
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// tokenizer.model, chat_template.jinja, those present) copied beside the
// weights, and generation_config.json written with the bos/eos ids, so
// AutoTokenizer and generation find what they need in the folder as it is.
//
// Thread-safety: pure function over files.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shard {

// tokenizer: a LoadTokenizer spec (folder or file). "byte" copies nothing and
// writes no generation_config.json. Returns the file names written.
StatusOr<std::vector<std::string>> ExportTokenizerFiles(const std::string& tokenizer, const std::string& out_dir);

}  // namespace shard
