// A compiled Jinja template (the subset HF chat templates use; see
// docs/chat-templates.md) and its rendering against a JSON context.
//
//   auto t = jinja::Template::Compile(source);          // syntax errors here
//   auto r = t->Render({{"messages", ...}, {"add_generation_prompt", true}});
//   r->text; r->generation;                              // text, {% generation %} spans
//
// Errors (syntax, a construct outside the subset, a failed evaluation,
// raise_exception, a budget of budget.h exceeded: nesting, steps, memory,
// output) are INVALID_ARGUMENT "template line N: ..."; no exception leaves.
//
// Thread-safety: a compiled Template is immutable; Render may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "shard/common/status.h"
#include "shard/data/jinja/interpreter.h"

namespace shard::jinja {

struct RenderOptions {
  // "YYYY-MM-DD HH:MM:SS" (UTC) that strftime_now formats; empty: the clock.
  std::string now;
  Limits limits = {};  // what one render may spend (budget.h)
};

class Template {
 public:
  static StatusOr<Template> Compile(std::string_view source);
  // Context keys become template variables (insertion order is kept for tojson).
  StatusOr<Rendered> Render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace shard::jinja
