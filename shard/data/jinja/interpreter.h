// Runs a parsed template against a context: scopes (a for loop and a macro
// call open one, as in Jinja; `set` inside a loop does not leak out), the loop
// variable, macros, break/continue, and {% generation %} spans recorded as byte
// ranges of the output.
//
// Thread-safety: pure function (all state lives in one call).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "shard/data/jinja/ast.h"
#include "shard/data/jinja/budget.h"

namespace shard::jinja {

struct Rendered {
  std::string text;
  // [begin, end) byte ranges of text rendered inside {% generation %} blocks.
  std::vector<std::pair<size_t, size_t>> generation;
};

// Throws JinjaError (with the line) on a failed evaluation, raise_exception or
// a budget exceeded. Runs inside the caller's BudgetScope (template.cc).
Rendered Execute(const Body& body, Object context, const Limits& limits);

}  // namespace shard::jinja
