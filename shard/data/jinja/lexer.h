// Splits a template into tokens: literal text, tag delimiters and the tokens of
// the expressions inside tags. Whitespace control follows HF's environment
// (trim_blocks and lstrip_blocks on; `{%-`/`-%}`, `{{-`/`-}}`, `{#-`/`-#}` strip
// all whitespace on their side) and one trailing newline of the template is
// dropped, as Jinja does by default. Comments produce no tokens.
//
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shard::jinja {

enum class Tok { kText, kExprOpen, kExprClose, kStmtOpen, kStmtClose, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok type = Tok::kEnd;
  std::string text;  // text, name, operator, number spelling or the decoded string literal
  int line = 1;      // line of the token's first character in the template source
};

// Throws JinjaError (with the line) on an unterminated tag, string or comment.
std::vector<Token> Lex(std::string_view source);

}  // namespace shard::jinja
