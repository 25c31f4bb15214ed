// The pre-tokenizer split patterns of byte-level BPE tokenizers, matched by hand.
//
// tokenizer.json files name their split as an Oniguruma regex with \p{L}/\p{N},
// which std::regex cannot express. Only a few patterns are in real use, so each is
// implemented as a hand-written matcher that follows the regex's alternation order
// and backtracking exactly (see pretokenizer.cc); an unknown pattern is refused.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "shard/common/status.h"

namespace shard {

enum class SplitPattern {
  kGpt2,    // GPT-2 / RoBERTa ByteLevel(use_regex): 's|'t|...| ?\p{L}+| ?\p{N}+|...
  kCl100k,  // GPT-4 cl100k and Llama-3: (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|...
  kQwen2,   // Qwen2/2.5/3: the cl100k pattern with single digits (\p{N})
};

// Recognises a tokenizer.json Split regex; UNIMPLEMENTED names an unknown one.
StatusOr<SplitPattern> SplitPatternFromRegex(std::string_view regex);
const char* SplitPatternName(SplitPattern p);

// Appends the pieces of `text` as byte ranges [begin, end) to *pieces; together
// they cover `text` exactly, in order ("Isolated" split behaviour).
void SplitText(SplitPattern p, std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>* pieces);

}  // namespace shard
