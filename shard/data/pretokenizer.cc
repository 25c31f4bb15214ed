#include "shard/data/pretokenizer.h"

#include <string>

#include "shard/data/text_util.h"

namespace shard {
namespace {

using text::CharClass;

// The patterns as they appear in tokenizer.json (after JSON unescaping).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kCl100kRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The text decoded once: code points, their classes and byte offsets.
struct Decoded {
  std::vector<char32_t> cp;
  std::vector<CharClass> cls;
  std::vector<uint32_t> off;  // off[i]: byte offset of cp[i]; off[n] = text size
  size_t n = 0;

  void Decode(std::string_view s) {
    cp.clear();
    cls.clear();
    off.clear();
    for (size_t i = 0; i < s.size();) {
      char32_t c;
      int len = text::DecodeUtf8(s, i, &c);
      cp.push_back(c);
      cls.push_back(text::Classify(c));
      off.push_back(static_cast<uint32_t>(i));
      i += len;
    }
    off.push_back(static_cast<uint32_t>(s.size()));
    n = cp.size();
  }
  bool Is(size_t i, CharClass c) const { return i < n && cls[i] == c; }
  bool Newline(size_t i) const { return i < n && (cp[i] == '\r' || cp[i] == '\n'); }
};

char32_t Lower(char32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d at i; returns the end or 0. ASCII case folding when
// `ignore_case` (as the reference JS implementations and tiktoken's tests do).
size_t Contraction(const Decoded& d, size_t i, bool ignore_case) {
  if (d.cp[i] != '\'' || i + 1 >= d.n) return 0;
  auto at = [&](size_t k) { return ignore_case ? Lower(d.cp[k]) : d.cp[k]; };
  const char32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 < d.n) {
    const char32_t b = at(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  return 0;
}

size_t Run(const Decoded& d, size_t i, CharClass c) {
  while (d.Is(i, c)) ++i;
  return i;
}

// \s+(?!\S)|\s+ at a whitespace run starting at i (shared tail of both patterns).
size_t WhitespaceTail(const Decoded& d, size_t i) {
  const size_t j = Run(d, i, CharClass::kSpace);
  if (j == d.n) return j;          // \s+ to the end: nothing follows
  if (j - 1 > i) return j - 1;     // \s+(?!\S): leave the last space to the next word
  return j;                        // a single space before a non-space: \s+
}

// One match of the GPT-2 pattern at i (i < n); returns its end.
size_t MatchGpt2(const Decoded& d, size_t i) {
  if (size_t e = Contraction(d, i, /*ignore_case=*/false)) return e;
  const size_t k = d.cp[i] == ' ' ? i + 1 : i;  // the optional leading ' '
  for (CharClass c : {CharClass::kLetter, CharClass::kNumber, CharClass::kOther})
    if (d.Is(k, c)) return Run(d, k, c);
  return WhitespaceTail(d, i);
}

// One match of the cl100k / Qwen2 pattern at i; `max_digits` is 3 or 1.
size_t MatchCl100k(const Decoded& d, size_t i, int max_digits) {
  if (size_t e = Contraction(d, i, /*ignore_case=*/true)) return e;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (d.Is(i, CharClass::kLetter)) return Run(d, i, CharClass::kLetter);
  if (!d.Newline(i) && !d.Is(i, CharClass::kNumber) && d.Is(i + 1, CharClass::kLetter))
    return Run(d, i + 1, CharClass::kLetter);
  // \p{N}{1,max}
  if (d.Is(i, CharClass::kNumber)) {
    size_t j = i;
    while (j < i + max_digits && d.Is(j, CharClass::kNumber)) ++j;
    return j;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t k = d.cp[i] == ' ' ? i + 1 : i;
  if (d.Is(k, CharClass::kOther)) {
    size_t j = Run(d, k, CharClass::kOther);
    while (d.Newline(j)) ++j;
    return j;
  }
  // Whitespace from here on. \s*[\r\n]+ ends just after the run's last newline.
  const size_t j = Run(d, i, CharClass::kSpace);
  for (size_t m = j; m > i; --m)
    if (d.Newline(m - 1)) return m;
  return WhitespaceTail(d, i);
}

}  // namespace

StatusOr<SplitPattern> SplitPatternFromRegex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kCl100kRegex) return SplitPattern::kCl100k;
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  return Unimplemented("pre-tokenizer regex " + std::string(regex) +
                       " is not one shardd knows (GPT-2, GPT-4 cl100k / Llama-3, Qwen2); its matcher is "
                       "hand-written, so a new pattern needs code in shard/data/pretokenizer.cc");
}

const char* SplitPatternName(SplitPattern p) {
  switch (p) {
    case SplitPattern::kGpt2: return "gpt2";
    case SplitPattern::kCl100k: return "cl100k";
    case SplitPattern::kQwen2: return "qwen2";
  }
  return "?";
}

void SplitText(SplitPattern p, std::string_view s, std::vector<std::pair<uint32_t, uint32_t>>* pieces) {
  thread_local Decoded d;
  d.Decode(s);
  for (size_t i = 0; i < d.n;) {
    size_t e = p == SplitPattern::kGpt2 ? MatchGpt2(d, i) : MatchCl100k(d, i, p == SplitPattern::kCl100k ? 3 : 1);
    if (e <= i) e = i + 1;  // unreachable: every code point matches some alternative
    pieces->emplace_back(d.off[i], d.off[e]);
    i = e;
  }
}

}  // namespace shard
