#include "shard/data/jinja/template.h"

#include <new>
#include <stdexcept>

#include "shard/data/jinja/budget.h"
#include "shard/data/jinja/builtins.h"
#include "shard/data/jinja/lexer.h"
#include "shard/data/jinja/parser.h"

namespace shard::jinja {
namespace {
Status ToStatus(const JinjaError& e) {
  return InvalidArgument((e.line > 0 ? "template line " + std::to_string(e.line) + ": " : "template: ") + e.message);
}

// An exception from outside the engine's own (one raised where no line is known).
Status ToStatus(const std::exception& e, const char* doing) {
  if (dynamic_cast<const std::bad_alloc*>(&e)) return InvalidArgument(std::string("template: out of memory ") + doing);
  return InvalidArgument(std::string("template: internal error ") + doing + ": " + e.what());
}
}  // namespace

StatusOr<Template> Template::Compile(std::string_view source) {
  try {
    Template t;
    t.body_ = std::make_shared<const Body>(Parse(Lex(source)));
    return t;
  } catch (const JinjaError& e) {
    return ToStatus(e);
  } catch (const std::exception& e) {
    return ToStatus(e, "while parsing");
  }
}

StatusOr<Rendered> Template::Render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_object()) return InvalidArgument("template context must be a JSON object");
  try {
    // Declared first, so every value of the render is gone before it is.
    RenderBudget budget(options.limits);
    BudgetScope scope(&budget);
    Object vars = Globals(options.now);
    for (auto it = context.begin(); it != context.end(); ++it) {
      try {
        vars.emplace_back(it.key(), Value::FromJson(it.value()));
      } catch (JinjaError& e) {
        e.message = "context variable '" + it.key() + "': " + e.message;
        throw;
      }
    }
    return Execute(*body_, std::move(vars), options.limits);
  } catch (const JinjaError& e) {
    return ToStatus(e);
  } catch (const std::exception& e) {
    return ToStatus(e, "while rendering");
  }
}

}  // namespace shard::jinja
