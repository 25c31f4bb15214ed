// The Jinja subset, one construct at a time (pure: no node, no files). The
// reference comparison over real templates is chat_template_parity_test.cc.
#include <gtest/gtest.h>

#include "shard/data/jinja/template.h"

namespace shard::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string R(std::string_view src, const json& vars = json::object()) {
  auto t = Template::Compile(src);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return "<compile error>";
  auto r = t->Render(vars, {"2026-07-26 12:00:00"});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->text : "<render error>";
}

// The error message of compiling or rendering src.
std::string E(std::string_view src, const json& vars = json::object()) {
  auto t = Template::Compile(src);
  if (!t.ok()) return t.status().message();
  auto r = t->Render(vars);
  EXPECT_FALSE(r.ok()) << "rendered: " << r->text;
  return r.ok() ? "" : r.status().message();
}

const json kVars = {{"xs", {"a", "b", "c"}}, {"d", {{"a", 1}, {"b", "two"}}}, {"n", nullptr}, {"t", true},
                    {"people", {{{"name", "ann"}, {"age", 3}}, {{"name", "bob"}, {"age", 4}}}}};

TEST(Jinja, IfElifElse) {
  EXPECT_EQ(R("{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}"),
            "one,two,many,");
  EXPECT_EQ(R("{% if n %}x{% endif %}{% if not n %}y{% endif %}", kVars), "y");
}

TEST(Jinja, ForLoopVariables) {
  EXPECT_EQ(R("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.length }}"
              "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %};{% endfor %}", kVars),
            "10323F;21213;32103L;");
  EXPECT_EQ(R("{% for x in xs %}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}", kVars), "b|ac|b|");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in xs if x != 'b' %}{{ x }}{{ loop.length }}{% endfor %}", kVars), "a2c2");
  EXPECT_EQ(R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", kVars), "a=1;b=two;");
  EXPECT_EQ(R("{% for k in d %}{{ k }}{% endfor %}", kVars), "ab");
  EXPECT_EQ(R("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{% if x == 'c' %}{% break %}{% endif %}{{ x }}"
              "{% endfor %}", kVars), "a");
  EXPECT_EQ(R("{% for x in undefined_thing %}x{% endfor %}ok"), "ok");
}

TEST(Jinja, SetScopingNamespaceAndBlockSet) {
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"), "21");
  EXPECT_EQ(R("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(R("{% set y %}a{{ 1 + 1 }}b{% endset %}[{{ y }}]"), "[a2b]");
  EXPECT_EQ(R("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_NE(E("{% set q.x = 1 %}").find("not a namespace"), std::string::npos);
}

TEST(Jinja, Macros) {
  EXPECT_EQ(R("{% macro f(a, b='B') %}({{ a }}{{ b }}){% endmacro %}{{ f(1) }}{{ f(2, b='c') }}{{ f(3, 4) }}"),
            "(1B)(2c)(34)");
  EXPECT_EQ(R("{% set g = 'G' %}{% macro f() %}{{ g }}{% endmacro %}{{ f() }}"), "G");
  EXPECT_NE(E("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}").find("macro f takes 1 arguments"), std::string::npos);
}

TEST(Jinja, Filters) {
  EXPECT_EQ(R("{{ '  pad \n' | trim }}|{{ xs | length }}|{{ xs | count }}|{{ 'é日' | length }}", kVars), "pad|3|3|2");
  EXPECT_EQ(R("{{ xs | join(',') }}|{{ xs | join }}|{{ people | join(',', attribute='name') }}", kVars), "a,b,c|abc|ann,bob");
  EXPECT_EQ(R("{{ 'ab' | upper }}{{ 'ÉA' | lower }}{{ 'hello world' | title }}{{ 'hELLO' | capitalize }}"),
            "ABéaHello WorldHello");
  EXPECT_EQ(R("{{ 'a-b-c' | replace('-', '+') }}|{{ xs | first }}{{ xs | last }}|{{ 'ab' | list | join('.') }}", kVars), "a+b+c|ac|a.b");
  EXPECT_EQ(R("{{ missing | default('dflt') }}|{{ '' | default('e', true) }}|{{ 'v' | d('x') }}"), "dflt|e|v");
  EXPECT_EQ(R("{{ d | items | length }}|{{ 3 | string ~ 'x' }}|{{ '42' | int + 1 }}|{{ 'no' | int }}|{{ 2.7 | int }}", kVars),
            "2|3x|43|0|2");
  EXPECT_EQ(R("{{ '<b>' | safe }}|{{ [3, 1, 2] | sort | join }}|{{ [1, 1, 2] | unique | join }}|{{ [1, 2] | reverse | join }}"),
            "<b>|123|12|21");
  EXPECT_EQ(R("{{ people | map(attribute='name') | join(' ') }}|{{ xs | map('upper') | join }}", kVars), "ann bob|ABC");
  EXPECT_EQ(R("{{ people | selectattr('age', 'equalto', 3) | map(attribute='name') | join }}|"
              "{{ people | rejectattr('age', 'eq', 3) | map(attribute='name') | join }}|"
              "{{ [1, 2, 3, 4] | select('odd') | join }}|{{ [1, 2, 3, 4] | reject('even') | join }}|"
              "{{ [0, 1, none, 'x'] | select | list | length }}", kVars),
            "ann|bob|13|13|2");
  EXPECT_EQ(R("{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"), "a\n  b|  a\n  b");
}

TEST(Jinja, ToJsonIsPythonJsonDumps) {
  const json v = {{"d", {{"b", 1}, {"a", {true, nullptr, 2.5, "é\"<\n"}}, {"e", json::object()}, {"f", json::array()}}}};
  EXPECT_EQ(R("{{ d | tojson }}", v), R"({"b": 1, "a": [true, null, 2.5, "é\"<\n"], "e": {}, "f": []})");
  EXPECT_EQ(R("{{ d | tojson(indent=2) }}", v),
            "{\n  \"b\": 1,\n  \"a\": [\n    true,\n    null,\n    2.5,\n    \"é\\\"<\\n\"\n  ],\n  \"e\": {},\n  \"f\": []\n}");
  EXPECT_EQ(R("{{ d | tojson(separators=(',', ':')) }}", v), R"({"b":1,"a":[true,null,2.5,"é\"<\n"],"e":{},"f":[]})");
  EXPECT_EQ(R("{{ 1.0 | tojson }} {{ '\x01' | tojson }}"), "1.0 \"\\u0001\"");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(R("{% if x is defined %}1{% endif %}{% if y is undefined %}2{% endif %}{% if n is none %}3{% endif %}"
              "{% if 's' is string %}4{% endif %}{% if 1.5 is number %}5{% endif %}{% if d is mapping %}6{% endif %}"
              "{% if xs is iterable %}7{% endif %}{% if xs is sequence %}8{% endif %}{% if t is boolean %}9{% endif %}"
              "{% if t is true %}a{% endif %}{% if t is false %}X{% endif %}{% if 1 is equalto 1 %}b{% endif %}"
              "{% if 2 is eq(2) %}c{% endif %}{% if 'a' is in xs %}d{% endif %}{% if n is not none %}X{% endif %}"
              "{% if 3 is odd %}e{% endif %}{% if 4 is divisibleby 2 %}f{% endif %}",
              json{{"x", 1}, {"n", nullptr}, {"d", json::object()}, {"xs", {"a"}}, {"t", true}}),
            "123456789abcdef");
  EXPECT_NE(E("{{ 1 is prime }}").find("unsupported test 'prime'"), std::string::npos);
}

TEST(Jinja, StringDictAndListMethods) {
  EXPECT_EQ(R("{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.startswith('b') }}"), "TrueTrueFalse");
  EXPECT_EQ(R("[{{ '  x  '.strip() }}][{{ 'xxhixx'.lstrip('x') }}][{{ 'hi\n\n'.rstrip('\n') }}][{{ '\n a'.lstrip() }}]"),
            "[x][hixx][hi][a]");
  EXPECT_EQ(R("{{ 'a,b,,c'.split(',') | join('|') }}/{{ ' a  b '.split() | join('|') }}/{{ 'a.b.c'.split('.', 1)[1] }}"),
            "a|b||c/a|b/b.c");
  EXPECT_EQ(R("{{ 'aB'.upper() }}{{ 'aB'.lower() }}{{ 'ab cd'.title() }}{{ 'aaa'.replace('a', 'b', 2) }}"), "ABabAb Cdbba");
  EXPECT_EQ(R("{{ '{} and {}'.format(1, 'x') }}|{{ '{1}{0}'.format('a', 'b') }}|{{ ', '.join(['a', 'b']) }}"), "1 and x|ba|a, b");
  EXPECT_EQ(R("{{ d.get('a') }}{{ d.get('zz', 'q') }}{{ d.get('zz') }}|{{ d.keys() | join }}|{{ d.values() | join }}", kVars),
            "1qNone|ab|1two");
  EXPECT_EQ(R("{% set l = [] %}{% set _ = l.append(1) %}{{ l | length }}"), "1");
}

TEST(Jinja, SlicingAndIndexing) {
  EXPECT_EQ(R("{{ xs[1:] | join }}|{{ xs[:-1] | join }}|{{ xs[::-1] | join }}|{{ xs[::2] | join }}|{{ xs[-1] }}|{{ xs[5] }}",
              kVars), "bc|ab|cba|ac|c|");
  EXPECT_EQ(R("{{ 'hello'[1:3] }}|{{ 'héllo'[1] }}|{{ 'abc'[::-1] }}|{{ d['b'] }}|{{ d.b }}", kVars), "el|é|cba|two|two");
}

TEST(Jinja, OperatorsAndExpressions) {
  EXPECT_EQ(R("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 3 }}|{{ 1 + 2.0 }}|{{ 'ab' * 2 }}"),
            "7|3|-4|1|3.5|8|3.0|abab");
  EXPECT_EQ(R("{{ 'a' ~ 1 ~ 'b' }}|{{ 'x' if 1 > 2 else 'y' }}|{{ 'x' if false }}|{{ 'b' in 'abc' }}|{{ 'z' not in xs }}",
              kVars), "a1b|y||True|True");
  EXPECT_EQ(R("{{ [1] + [2] }}|{{ 1 == 1.0 }}|{{ 'a' < 'b' }}|{{ 2 >= 3 }}|{{ (1, 2) | length }}"), "[1, 2]|True|True|False|2");
  EXPECT_EQ(R("{{ none or 'x' }}|{{ 0 and 1 }}|{{ not 0 }}|{{ {'k': [1, 'v']} }}|{{ none }}"), "x|0|True|{'k': [1, 'v']}|None");
  EXPECT_EQ(R("{{ 'a' 'b' }}|{{ \"q'\" }}|{{ 'tab\\tnl\\nu\\u00e9' }}"), "ab|q'|tab\tnl\nué");
}

TEST(Jinja, UndefinedAttributesAreEmptyAndFalsy) {
  EXPECT_EQ(R("[{{ d.nope }}][{{ nope }}][{{ nope.deeper }}]{% if d.nope %}X{% endif %}{% if not d.nope %}ok{% endif %}", kVars),
            "[][][]ok");
  EXPECT_NE(E("{{ nope + 1 }}").find("unsupported operand"), std::string::npos);
}

TEST(Jinja, WhitespaceControlTrimAndLstripBlocks) {
  EXPECT_EQ(R("a  {%- if true -%}  b  {%- endif %}\n  c {{- ' d ' -}} e\n  {% if true %}\n    f\n  {% endif %}\ng"),
            "ab  c d e\n    f\ng");
  EXPECT_EQ(R("x{# a comment #}y {#- trimmed -#} z"), "xyz");
  EXPECT_EQ(R("line\n"), "line");  // one trailing newline dropped, as Jinja
  EXPECT_EQ(R("{% for x in xs %}\n  {{ x }}\n{% endfor %}\n", kVars), "  a\n  b\n  c\n");
}

TEST(Jinja, RaiseExceptionAndStrftime) {
  EXPECT_EQ(E("ok\n{{ raise_exception('Roles must alternate') }}"),
            "template line 2: the template raised an error: Roles must alternate");
  EXPECT_EQ(R("{{ strftime_now('%d %b %Y') }}"), "26 Jul 2026");
}

TEST(Jinja, GenerationBlocksRecordSpans) {
  auto t = Template::Compile("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                             "{% endgeneration %}{% else %}<{{ m.content }}>{% endif %}{% endfor %}");
  ASSERT_TRUE(t.ok());
  json msgs = json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}},
                           {{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "ok!"}}});
  auto r = t->Render({{"messages", msgs}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, "<hi>yo<q>ok!");
  ASSERT_EQ(r->generation.size(), 2u);
  EXPECT_EQ(r->text.substr(r->generation[0].first, r->generation[0].second - r->generation[0].first), "yo");
  EXPECT_EQ(r->text.substr(r->generation[1].first, r->generation[1].second - r->generation[1].first), "ok!");
}

TEST(Jinja, ConstructsOutsideTheSubsetNameThemselvesAndTheLine) {
  EXPECT_EQ(E("a\n{% include 'x.j2' %}"), "template line 2: unsupported construct {% include %} (outside the chat-template "
                                          "subset of Jinja)");
  EXPECT_EQ(E("{% extends 'base' %}"), "template line 1: unsupported construct {% extends %} (outside the chat-template "
                                       "subset of Jinja)");
  EXPECT_EQ(E("\n\n{{ x | wordwrap }}"), "template line 3: unsupported filter 'wordwrap' (outside the chat-template "
                                         "subset of Jinja)");
  EXPECT_NE(E("{% if x %}never closed").find("missing {% endif %}"), std::string::npos);
  EXPECT_NE(E("{% endfor %}").find("without its opening tag"), std::string::npos);
  EXPECT_NE(E("{{ 'unterminated }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(E("{{ x.y( }}").find("line 1"), std::string::npos);
  EXPECT_NE(E("{{ cycler(1) }}").find("'cycler' is not a function"), std::string::npos);
}

}  // namespace
}  // namespace shard::jinja
