#include "shard/data/jinja/lexer.h"

#include <cctype>
#include <cstdlib>

#include "shard/data/jinja/value.h"

namespace shard::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {
    if (!src_.empty() && src_.back() == '\n') src_.remove_suffix(1);
  }

  std::vector<Token> Run() {
    while (pos_ < src_.size()) {
      LexText();
      if (pos_ >= src_.size()) break;
      const char kind = src_[pos_ + 1];
      if (kind == '#') {
        LexComment();
      } else {
        LexTag(kind == '%');
      }
    }
    out_.push_back({Tok::kEnd, "", line_});
    return std::move(out_);
  }

 private:
  bool At(std::string_view s) const { return src_.substr(pos_, s.size()) == s; }
  void Advance(size_t n) {
    for (size_t k = 0; k < n && pos_ < src_.size(); ++k)
      if (src_[pos_++] == '\n') ++line_;
  }
  void SkipSpace() {
    while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(1);
  }
  // The newline right after a block or comment tag goes (trim_blocks).
  void TrimBlock() {
    if (pos_ < src_.size() && src_[pos_] == '\n') Advance(1);
  }
  // `{%-` and friends: the text before loses its trailing whitespace.
  void StripPreviousText() {
    if (out_.empty() || out_.back().type != Tok::kText) return;
    std::string& t = out_.back().text;
    while (!t.empty() && IsSpace(t.back())) t.pop_back();
    if (t.empty()) out_.pop_back();
  }

  void LexText() {
    const size_t start = pos_;
    const int line = line_;
    while (pos_ < src_.size() && !(src_[pos_] == '{' && pos_ + 1 < src_.size() &&
                                   (src_[pos_ + 1] == '%' || src_[pos_ + 1] == '{' || src_[pos_ + 1] == '#')))
      Advance(1);
    std::string text(src_.substr(start, pos_ - start));
    // lstrip_blocks: spaces and tabs from a line start up to a block or comment tag go.
    if (pos_ < src_.size() && src_[pos_ + 1] != '{') {
      size_t k = text.size();
      while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
      const bool line_start = k > 0 ? text[k - 1] == '\n' : (start == 0 || src_[start - 1] == '\n');
      if (line_start) text.resize(k);
    }
    if (!text.empty()) out_.push_back({Tok::kText, std::move(text), line});
  }

  void LexComment() {
    const int line = line_;
    Advance(2);
    if (At("-")) StripPreviousText();
    const size_t end = src_.find("#}", pos_);
    if (end == std::string_view::npos) Fail("unterminated comment {# ... #}", line);
    const bool strip_after = end > pos_ && src_[end - 1] == '-';
    Advance(end + 2 - pos_);
    if (strip_after) SkipSpace();
    else TrimBlock();
  }

  void LexTag(bool statement) {
    const int open_line = line_;
    Advance(2);
    if (At("-")) {
      StripPreviousText();
      Advance(1);
    }
    out_.push_back({statement ? Tok::kStmtOpen : Tok::kExprOpen, "", open_line});
    int depth = 0;  // open `{` inside the tag, so a dict's `}}` does not close an expression
    while (true) {
      SkipSpace();
      if (pos_ >= src_.size()) Fail(statement ? "unterminated tag {% ... %}" : "unterminated tag {{ ... }}", open_line);
      const std::string_view close = statement ? "%}" : "}}";
      const bool can_close = statement || depth == 0;
      if (can_close && (At(close) || (At("-") && src_.substr(pos_ + 1, 2) == close))) {
        const bool strip = src_[pos_] == '-';
        Advance(strip ? 3 : 2);
        out_.push_back({statement ? Tok::kStmtClose : Tok::kExprClose, "", line_});
        if (strip) SkipSpace();
        else if (statement) TrimBlock();
        return;
      }
      const char c = src_[pos_];
      if (c == '{') ++depth;
      if (c == '}') --depth;
      LexExprToken();
    }
  }

  void LexExprToken() {
    const char c = src_[pos_];
    const int line = line_;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = pos_;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) Advance(1);
      out_.push_back({Tok::kName, std::string(src_.substr(start, pos_ - start)), line});
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      const size_t start = pos_;
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) Advance(1);
      bool is_float = false;
      if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
        is_float = true;
        Advance(1);
        while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) Advance(1);
      }
      // An exponent (1e10, 2.5E-3) makes a float, as in Jinja.
      if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
        size_t k = pos_ + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
          is_float = true;
          Advance(k - pos_);
          while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) Advance(1);
        }
      }
      std::string num;
      for (char d : src_.substr(start, pos_ - start))
        if (d != '_') num += d;
      out_.push_back({is_float ? Tok::kFloat : Tok::kInt, num, line});
      return;
    }
    if (c == '\'' || c == '"') {
      out_.push_back({Tok::kString, LexString(c), line});
      return;
    }
    static constexpr std::string_view kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
                                                "<",  ">",  "=",  "(",  ")",  "[",  "]", "{", "}", ".", ",", ":", "|"};
    for (std::string_view op : kOps)
      if (At(op)) {
        Advance(op.size());
        out_.push_back({Tok::kOp, std::string(op), line});
        return;
      }
    Fail(std::string("unexpected character '") + c + "' in a tag", line);
  }

  std::string LexString(char quote) {
    const int line = line_;
    Advance(1);
    std::string s;
    while (true) {
      if (pos_ >= src_.size()) Fail("unterminated string literal", line);
      const char c = src_[pos_];
      if (c == quote) {
        Advance(1);
        return s;
      }
      if (c != '\\') {
        s += c;
        Advance(1);
        continue;
      }
      Advance(1);
      if (pos_ >= src_.size()) Fail("unterminated string literal", line);
      const char e = src_[pos_];
      Advance(1);
      switch (e) {
        case 'n': s += '\n'; break;
        case 't': s += '\t'; break;
        case 'r': s += '\r'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'v': s += '\v'; break;
        case '0': s += '\0'; break;
        case '\\': case '\'': case '"': s += e; break;
        case '\n': break;  // a backslash-newline continues the literal
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          const std::string hex(src_.substr(pos_, n));
          char* end = nullptr;
          const unsigned long cp = std::strtoul(hex.c_str(), &end, 16);
          if (hex.size() != n || end != hex.c_str() + n) Fail("bad \\" + std::string(1, e) + " escape in a string", line);
          AppendUtf8(static_cast<uint32_t>(cp), &s);
          Advance(n);
          break;
        }
        default: s += '\\'; s += e;  // Python keeps unknown escapes as they are
      }
    }
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace shard::jinja
