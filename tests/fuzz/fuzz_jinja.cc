// A Jinja template and its render context together: the bytes up to the first
// NUL are the template, the rest a JSON object of variables (when it is not
// one, a small chat conversation is the context). Compile, then render with
// and without the generation prompt. Seeds: the real chat templates with
// their conversations; jinja.dict holds the syntax.
//
// The render's budgets are smaller than a job's (budget.h), so a unit stays
// well inside libFuzzer's time and memory limits; the nesting depth is the
// default one, so a deep recursion is tried against the real stack bound.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "shard/common/json_depth.h"
#include "shard/data/jinja/template.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using ojson = nlohmann::ordered_json;

const ojson& DefaultContext() {
  static const ojson* c = new ojson(ojson::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <b>"},
                 {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello!"}, {"role": "user", "content": "2+2?"}],
    "tools": [{"type": "function", "function": {"name": "add", "parameters": {"a": 1}}}],
    "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false})"));
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view source = in.substr(0, nul);
  ojson context = DefaultContext();
  if (nul != std::string_view::npos) {
    const std::string_view rest = in.substr(nul + 1);
    if (shard::CheckJsonDepth(rest, "context").ok()) {
      ojson c = ojson::parse(rest.begin(), rest.end(), nullptr, /*allow_exceptions=*/false);
      if (c.is_object()) context = std::move(c);
    }
  }
  auto t = shard::jinja::Template::Compile(source);
  shard::fuzz::CheckRefusal(t.status());
  if (!t.ok()) return 0;
  shard::jinja::RenderOptions o;
  o.now = "2026-01-02 03:04:05";
  o.limits.max_steps = 50'000;  // ~0.1 s of CPU per render under ASan at the dearest step (a loop turn)
  o.limits.max_live_bytes = 64 << 20;
  o.limits.max_value_bytes = 4 << 20;
  o.limits.max_output_bytes = 4 << 20;
  for (bool gen : {false, true}) {
    context["add_generation_prompt"] = gen;
    auto r = t->Render(context, o);
    shard::fuzz::CheckRefusal(r.status());
    if (r.ok())
      for (const auto& [b, e] : r->generation)
        if (b > e || e > r->text.size()) __builtin_trap();  // a span outside the text
  }
  return 0;
}
