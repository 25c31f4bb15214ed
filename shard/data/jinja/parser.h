// Parses a token stream into statement nodes (the chat-template subset of Jinja:
// if/elif/else, for/else with loop filters, set and block set, macro, break,
// continue, generation). Anything else is refused by name and line.
//
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "shard/data/jinja/ast.h"
#include "shard/data/jinja/lexer.h"

namespace shard::jinja {

// Throws JinjaError naming the construct and its line.
Body Parse(const std::vector<Token>& tokens);

}  // namespace shard::jinja
