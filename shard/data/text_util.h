// UTF-8 and Unicode helpers for the tokenizers: code point decoding, the
// character classes the pre-tokenizer patterns use (\p{L}, \p{N}, \s) and NFC
// normalization. Classes and NFC come from ICU; ASCII takes a table fast path.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shard::text {

// Decodes the code point at s[i] into *cp and returns its length in bytes.
// Ill-formed bytes decode as U+FFFD with length 1 (never reads past s).
int DecodeUtf8(std::string_view s, size_t i, char32_t* cp);
void AppendUtf8(char32_t cp, std::string* out);
// Length of the well-formed UTF-8 sequence starting with byte b (1 for invalid).
inline int Utf8Length(uint8_t b) { return b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1; }

enum class CharClass : uint8_t {
  kOther = 0,   // [^\s\p{L}\p{N}]
  kLetter = 1,  // \p{L}: Lu Ll Lt Lm Lo
  kNumber = 2,  // \p{N}: Nd Nl No
  kSpace = 3,   // \s: the Unicode White_Space property
};
CharClass Classify(char32_t cp);

// Unicode NFC. Returns the input unchanged (no copy made by the caller's check)
// when it is ASCII or already normalized.
bool IsNfc(std::string_view s);
std::string ToNfc(std::string_view s);

}  // namespace shard::text
