#include "shard/data/jinja/template.h"

#include "shard/data/jinja/builtins.h"
#include "shard/data/jinja/lexer.h"
#include "shard/data/jinja/parser.h"

namespace shard::jinja {
namespace {
Status ToStatus(const JinjaError& e) {
  return InvalidArgument((e.line > 0 ? "template line " + std::to_string(e.line) + ": " : "template: ") + e.message);
}
}  // namespace

StatusOr<Template> Template::Compile(std::string_view source) {
  try {
    Template t;
    t.body_ = std::make_shared<const Body>(Parse(Lex(source)));
    return t;
  } catch (const JinjaError& e) {
    return ToStatus(e);
  }
}

StatusOr<Rendered> Template::Render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_object()) return InvalidArgument("template context must be a JSON object");
  try {
    Object vars = Globals(options.now);
    for (auto it = context.begin(); it != context.end(); ++it) vars.emplace_back(it.key(), Value::FromJson(it.value()));
    return Execute(*body_, std::move(vars));
  } catch (const JinjaError& e) {
    return ToStatus(e);
  }
}

}  // namespace shard::jinja
