// The Jinja engine on hostile templates and contexts (issue 28 item 3): every
// one ends in one error naming the line — never a crash, std::terminate, a
// hang or the host's memory — and the arithmetic and slicing Python does.
#include <gtest/gtest.h>

#include <string>

#include "shard/data/hf_chat_template.h"
#include "shard/data/jinja/template.h"

namespace shard::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string R(std::string_view src, const json& vars = json::object()) {
  auto t = Template::Compile(src);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return "<compile error>";
  auto r = t->Render(vars);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->text : "<render error>";
}

// The error of compiling or rendering src (every one is INVALID_ARGUMENT).
std::string E(std::string_view src, const json& vars = json::object(), const Limits& limits = {}) {
  auto t = Template::Compile(src);
  if (!t.ok()) {
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
    return t.status().message();
  }
  RenderOptions o;
  o.limits = limits;
  auto r = t->Render(vars, o);
  EXPECT_FALSE(r.ok()) << "rendered " << r->text.size() << " bytes";
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

std::string Repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(JinjaBounds, DeepSourceNestingIsASyntaxErrorNotACrash) {
  EXPECT_HAS(E("{{ " + Repeat("(", 100000) + "1" + Repeat(")", 100000) + " }}"), "template line 1: nested deeper than 128");
  EXPECT_HAS(E(Repeat("{% if true %}", 20000) + Repeat("{% endif %}", 20000)), "nested deeper than 128");
  EXPECT_HAS(E("{{ " + Repeat("[", 100000) + " }}"), "nested deeper than 128");
  EXPECT_HAS(E("{{ " + Repeat("{'a': ", 50000) + "1" + Repeat("}", 50000) + " }}"), "nested deeper than 128");
  EXPECT_HAS(E("{{ " + Repeat("not ", 100000) + "x }}"), "nested deeper than 128");
  EXPECT_HAS(E("{{ " + Repeat("- ", 100000) + "1 }}"), "nested deeper than 128");
  // Chains the parser reads in a loop still build a deep tree: bounded too.
  EXPECT_HAS(E("{{ 'a'" + Repeat(" | upper", 100000) + " }}"), "expression nested deeper than 128");
  EXPECT_HAS(E("{{ 1" + Repeat(" + 1", 100000) + " }}"), "expression nested deeper than 128");
  EXPECT_HAS(E("{{ x" + Repeat(".a", 100000) + " }}"), "expression nested deeper than 128");
  EXPECT_HAS(E("{{ f" + Repeat("()", 100000) + " }}"), "expression nested deeper than 128");
  // Within the bound, as before.
  EXPECT_EQ(R("{{ " + Repeat("(", 100) + "1" + Repeat(")", 100) + " }}"), "1");
  EXPECT_EQ(R("{{ 'a'" + Repeat(" | upper", 100) + " }}"), "A");
}

TEST(JinjaBounds, RecursiveMacrosStopAtTheDepthLimit) {
  EXPECT_EQ(E("\n{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").substr(0, 50),
            "template line 2: nesting deeper than 256 levels (a");
  EXPECT_HAS(E("{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% endmacro %}{{ a(1) }}"),
             "nesting deeper than 256 levels");
  // Recursion that ends is fine.
  EXPECT_EQ(R("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(30) }}"),
            "302928272625242322212019181716151413121110987654321");
}

TEST(JinjaBounds, SelfReferencingValuesPrintAsPythonAndFailTojson) {
  EXPECT_EQ(R("{% set a = [1] %}{{ a.append(a) }}{{ a }}"), "None[1, [...]]");
  EXPECT_HAS(E("{% set a = [1] %}{{ a.append(a) }}{{ a | tojson }}"), "circular reference");
  EXPECT_EQ(R("{% set l = [] %}{% set d = {'l': l} %}{{ l.append(d) }}{{ d }}"), "None{'l': [{...}]}");
  EXPECT_EQ(R("{% set ns = namespace(x=1) %}{% set ns.me = ns %}{{ ns.me.me.me.x }}{{ ns }}"), "1<Namespace>");
  EXPECT_HAS(E("{% set ns = namespace(x=1) %}{% set ns.me = ns %}{{ ns | tojson }}"), "circular reference");
  EXPECT_HAS(E("{% set b = [1] %}{% set c = [1] %}{{ b.append(b) }}{{ c.append(c) }}{{ b == c }}"), "nesting deeper than");
  // A 100,000-deep value frees without recursion; printing it is bounded.
  const std::string deep = "{% set ns = namespace(x=none) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}";
  EXPECT_EQ(R(deep + "ok"), "ok");
  EXPECT_HAS(E(deep + "{{ ns.x }}"), "nesting deeper than 256");
  EXPECT_HAS(E(deep + "{{ ns.x | tojson }}"), "nesting deeper than 256");
  // Macros holding macros, 100,000 deep, free without recursion too.
  EXPECT_EQ(R("{% set ns = namespace(f=none) %}{% for i in range(100000) %}{% macro g(x=ns.f) %}{% endmacro %}"
              "{% set ns.f = g %}{% endfor %}ok"),
            "ok");
}

TEST(JinjaBounds, DeepContextIsAnErrorNotACrash) {
  json context = json::object();
  context["messages"] = json::parse(Repeat("[", 100000) + Repeat("]", 100000));  // moved: a copy would recurse
  EXPECT_HAS(E("{{ messages }}", context), "context variable 'messages': nesting deeper than 256");
  EXPECT_HAS(E("{{ n }}", {{"n", json::parse("18446744073709551615")}}), "does not fit in 64 bits");
}

TEST(JinjaBounds, LibraryExceptionsBecomeErrorsWithTheLine) {
  EXPECT_EQ(E("\n{{ 99999999999999999999 }}"),
            "template line 2: integer literal 99999999999999999999 does not fit in 64 bits (template integers are int64)");
  EXPECT_HAS(E("{{ x.99999999999999999999 }}"), "does not fit in 64 bits");
  EXPECT_HAS(E("{{ '{99999999999999999999}'.format(1) }}"), "format: no argument for {99999999999999999999}");
  EXPECT_HAS(E("{{ '{:>999999999999}'.format(1) }}"), "format specs");
  EXPECT_EQ(R("{{ 'a\nb' | indent(-1) }}|{{ 'a\nb' | indent(2) }}"), "a\nb|a\n  b");
  EXPECT_HAS(E("{{ 'a\nb' | indent(10000000000) }}"), "filter indent: the result would be");
  EXPECT_HAS(E("{{ '9999999999999999999999' | int }}"), "does not fit in 64 bits");
  EXPECT_HAS(E("{{ 1e300 | int }}"), "cannot convert the float");
}

TEST(JinjaBounds, AllocationsAreBoundedBeforeTheyAreMade) {
  EXPECT_HAS(E("{{ 'a' * 10000000000 }}"), "string * integer: the result would be 10000000000 bytes, more than the 64 MiB");
  EXPECT_HAS(E("{{ 'a' * 1e10 }}"), "unsupported operand types for *: string and float");
  EXPECT_HAS(E("{{ range(10000000000) | length }}"), "range(): the result would be");
  EXPECT_HAS(E("{{ range(1e10) }}"), "expected an integer argument, not float");
  EXPECT_HAS(E("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
             "joining strings: the result would be");
  EXPECT_HAS(E("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"),
             "list + list: the result would be");
  EXPECT_HAS(E("{{ [[1]] | tojson(indent=1000000000000) }}"), "tojson(indent=...): the result would be");
  EXPECT_HAS(E("{{ ('x\n' * 1000) | indent('y' * 10000000) }}"), "filter indent: the result would be");
  EXPECT_HAS(E("{{ ('ab' * 10000000) | replace('a', 'aaaaaaaaaaaaaaa') }}"), "replace: the result would be");
  // One string held many times prints past the value bound, not past memory.
  const std::string held = "{% set s = 'x' * 1000000 %}{% set l = [] %}{% for i in range(1000) %}{{ l.append(s) }}{% endfor %}";
  EXPECT_HAS(E(held + "{{ l }}"), "printing a value: the result would be");
  EXPECT_HAS(E(held + "{{ l | join }}"), "filter join: the result would be");
  EXPECT_HAS(E(held + "{{ l | tojson }}"), "tojson: the result would be");
}

TEST(JinjaBounds, OutputMemoryAndStepBudgetsNameTheLine) {
  Limits small;
  small.max_output_bytes = 1 << 20;
  EXPECT_EQ(E("a\n{% for i in range(100) %}{{ 'x' * 100000 }}{% endfor %}", json::object(), small),
            "template line 2: the rendered text grew past its budget of 1 MiB");
  Limits memory;
  memory.max_live_bytes = 8 << 20;
  EXPECT_HAS(E("{% set l = [] %}\n{% for i in range(100) %}{{ l.append('x' * 1000000 ~ i) }}{% endfor %}", json::object(), memory),
             "template line 2: the template's values grew past the memory budget (8 MiB alive at once)");
  // Values that are dropped give their bytes back: the same work within the budget.
  EXPECT_TRUE(Template::Compile("{% for i in range(100) %}{% set s = 'x' * 1000000 ~ i %}{% endfor %}")
                  ->Render(json::object(), {.now = "", .limits = memory})
                  .ok());
  // Nested loops that would spin for hours end at the step budget (default limits).
  EXPECT_EQ(E("{% for i in range(100000) %}\n{% for j in range(100000) %}{% endfor %}{% endfor %}"),
            "template line 2: the template ran past its step budget (20000000 steps: a loop or recursion too large to "
            "be a chat template's)");
}

// A loop turn builds a frame and the nine-entry `loop` dict: it is charged as
// ten steps, so a loop with a short body cannot run ten times longer per step
// than the rest of the engine (the fuzzer's slowest unit was such a loop).
TEST(JinjaBounds, LoopTurnsAreChargedForTheLoopObjectTheyBuild) {
  Limits steps;
  steps.max_steps = 100'000;
  EXPECT_HAS(E("{% for i in range(20000) %}x{% endfor %}", json::object(), steps),
             "the template ran past its step budget (100000 steps");
  EXPECT_EQ(Template::Compile("{% for i in range(5000) %}x{% endfor %}")
                ->Render(json::object(), {.now = "", .limits = steps})
                ->text.size(),
            5000u);
}

TEST(JinjaBounds, IntegerArithmeticIsCheckedInt64) {
  EXPECT_HAS(E("{{ 2 ** 10000 }}"), "integer overflow: 2 ** 10000 does not fit in 64 bits");
  EXPECT_HAS(E("{{ 9223372036854775807 * 2 }}"), "integer overflow");
  EXPECT_HAS(E("{{ 9223372036854775807 + 1 }}"), "integer overflow");
  EXPECT_HAS(E("{{ -(-9223372036854775807 - 1) }}"), "integer overflow");
  EXPECT_HAS(E("{{ (-9223372036854775807 - 1) // -1 }}"), "integer overflow");
  EXPECT_HAS(E("{{ (-9223372036854775807 - 1) | abs }}"), "integer overflow");
  EXPECT_EQ(R("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
  EXPECT_EQ(R("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}"), "True");
  EXPECT_EQ(R("{{ 2 ** 62 }} {{ 9007199254740993 // 1 }} {{ 9007199254740993 == 9007199254740992 }}"),
            "4611686018427387904 9007199254740993 False");
  EXPECT_EQ(R("{{ 7 // -2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** -1 }} {{ -7.5 % 2 }} {{ 1e3 }}"),
            "-4 -4 2 -2 0.5 0.5 1000.0");
  EXPECT_HAS(E("{{ 1.5 // 0 }}"), "division by zero");
}

TEST(JinjaBounds, SlicesFollowPython) {
  EXPECT_EQ(R("{{ [1,2,3,4][1::9223372036854775807] }}"), "[2]");
  EXPECT_EQ(R("{{ [1,2,3,4][::-9223372036854775807] }}"), "[4]");
  EXPECT_EQ(R("{{ [1,2,3,4][::-1] }} {{ [1,2,3,4][3:0:-1] }} {{ [1,2,3,4][-1:-100:-2] }} {{ [1,2,3,4][5::-1] }}"),
            "[4, 3, 2, 1] [4, 3, 2] [4, 2] [4, 3, 2, 1]");
  EXPECT_EQ(R("{{ [1,2,3,4][-100:100] }} {{ [1,2,3][-9223372036854775807 - 1:] }} {{ [1,2,3][:-9223372036854775807] }}"),
            "[1, 2, 3, 4] [1, 2, 3] []");
  EXPECT_EQ(R("{{ 'abcd'[::-2] }} {{ 'héllo'[1:3] }} {{ 'héllo'[1] }} {{ 'héllo'[-1] }}"), "db él é o");
  EXPECT_EQ(R("{{ range(0, 9223372036854775807, 4611686018427387904) | list }}"), "[0, 4611686018427387904]");
  EXPECT_EQ(R("{{ range(9223372036854775806, -9223372036854775807 - 1, -9223372036854775807) | list }}"),
            "[9223372036854775806, -1]");
}

TEST(JinjaBounds, BreakOutsideALoopIsASyntaxError) {
  EXPECT_EQ(E("a\n{% break %}"), "template line 2: {% break %} outside a loop");
  EXPECT_HAS(E("{% continue %}"), "{% continue %} outside a loop");
  EXPECT_HAS(E("{% for x in [1] %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}"), "outside a loop");
  EXPECT_HAS(E("{% for x in [] %}{% else %}{% break %}{% endfor %}"), "outside a loop");
  EXPECT_EQ(R("{% for x in [1, 2] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "1");
}

TEST(JinjaBounds, EmptySubstringsCountAndReplaceAsPython) {
  EXPECT_EQ(R("{{ 'abc'.count('') }} {{ ''.count('') }} {{ 'héllo'.count('') }}"), "4 1 6");
  EXPECT_EQ(R("{{ 'ab'.replace('', '-') }} {{ 'ab'.replace('', '-', 2) }} {{ '' | replace('', 'x') }}"), "-a-b- -a-b x");
}

TEST(JinjaBounds, TojsonIndentIsJsonDumpsIndent) {
  EXPECT_EQ(R("{{ [1, 2] | tojson(indent=-1) }}"), "[\n1,\n2\n]");
  EXPECT_EQ(R("{{ [1, 2] | tojson(indent=0) }}"), "[\n1,\n2\n]");
  EXPECT_EQ(R("{{ [1, 2] | tojson }}"), "[1, 2]");
}

// A chat template's errors carry the file it came from and the line.
TEST(JinjaBounds, ChatTemplateErrorsNameTheFileAndLine) {
  auto t = HfChatTemplate::FromSource("{% for m in messages %}\n{% for i in range(100000) %}{% for j in range(100000) %}"
                                      "{% endfor %}{% endfor %}{% endfor %}",
                                      {}, "/models/x/tokenizer_config.json");
  ASSERT_TRUE(t.ok());
  auto r = (*t)->Render(MessagesToJson({{Role::kUser, "hi"}}), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << "bad input: a job fails at once (worker exit 2)";
  EXPECT_HAS(r.status().message(), "/models/x/tokenizer_config.json: template line 2: the template ran past its step budget");
}

}  // namespace
}  // namespace shard::jinja
