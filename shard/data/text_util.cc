#include "shard/data/text_util.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <array>

#include "shard/common/status.h"

namespace shard::text {
namespace {

std::array<CharClass, 128> MakeAsciiTable() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = CharClass::kLetter;
    else if (c >= '0' && c <= '9') t[c] = CharClass::kNumber;
    else if (c == ' ' || (c >= 9 && c <= 13)) t[c] = CharClass::kSpace;
    else t[c] = CharClass::kOther;
  }
  return t;
}
const std::array<CharClass, 128> kAscii = MakeAsciiTable();

const icu::Normalizer2* Nfc() {
  static const icu::Normalizer2* nfc = [] {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
    SHARD_CHECK_MSG(U_SUCCESS(err) && n != nullptr, "ICU has no NFC data");
    return n;
  }();
  return nfc;
}

bool IsAscii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

}  // namespace

int DecodeUtf8(std::string_view s, size_t i, char32_t* cp) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + i;
  const size_t left = s.size() - i;
  const uint8_t b = p[0];
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  const int n = Utf8Length(b);
  if (n == 1 || static_cast<size_t>(n) > left) {
    *cp = 0xFFFD;
    return 1;
  }
  char32_t c = b & (0x7F >> n);
  for (int k = 1; k < n; ++k) {
    if ((p[k] & 0xC0) != 0x80) {
      *cp = 0xFFFD;
      return 1;
    }
    c = (c << 6) | (p[k] & 0x3F);
  }
  // Overlong forms, surrogates and out-of-range values are ill-formed.
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    *cp = 0xFFFD;
    return 1;
  }
  *cp = c;
  return n;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

CharClass Classify(char32_t cp) {
  if (cp < 128) return kAscii[cp];
  if (u_isUWhiteSpace(static_cast<UChar32>(cp))) return CharClass::kSpace;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharClass::kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CharClass::kNumber;
    default:
      return CharClass::kOther;
  }
}

bool IsNfc(std::string_view s) {
  if (IsAscii(s)) return true;
  UErrorCode err = U_ZERO_ERROR;
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  const bool yes = Nfc()->isNormalized(u, err);
  return U_SUCCESS(err) && yes;
}

std::string ToNfc(std::string_view s) {
  if (IsAscii(s)) return std::string(s);
  UErrorCode err = U_ZERO_ERROR;
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  if (Nfc()->isNormalized(u, err) && U_SUCCESS(err)) return std::string(s);
  err = U_ZERO_ERROR;
  icu::UnicodeString n = Nfc()->normalize(u, err);
  if (U_FAILURE(err)) return std::string(s);
  std::string out;
  n.toUTF8String(out);
  return out;
}

}  // namespace shard::text
