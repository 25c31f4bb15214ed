// Writes tokenizer golden files from the reference tokenizer.json implementation
// (@huggingface/tokenizers), checked against a second one (@lenml/tokenizers,
// transformers.js): every case must get the same ids from both.
//   node tokenizer_goldens.mjs TOKENIZER_DIR OUT_DIR
// Run through make_tokenizer_goldens.sh, which installs the packages.
import fs from "fs";
import path from "path";
import { createRequire } from "module";
import { pathToFileURL } from "url";

const [dir, out] = process.argv.slice(2);
const nm = path.join(dir, "node_modules");
const { Tokenizer } = await import(pathToFileURL(path.join(nm, "@huggingface/tokenizers/dist/tokenizers.mjs")));
const require = createRequire(path.join(dir, "package.json"));

// ---- The corpus: named cases covering what tokenizers get wrong -------------
const cases = [
  // ASCII and contractions (Llama-3's contractions are case-insensitive)
  "Hello world", "Hello, world! How are you?", "I'm sure they'll say we've done it; she'd know he's right.",
  "I'M SHOUTING, DON'T YOU'LL WE'D", "rock'n'roll 'quoted' ' '' x'", "The quick brown fox jumps over the lazy dog.",
  // numbers
  "1", "12", "123", "1234", "1234567890", "3.14159 2.71828", "1,000,000 and the 42nd", "٣٤٥ ١٢ digits",
  "Ⅻ ½ ² ³ ¼", "0x1F 1e-9 -7 +8 =9", "year 2024: 365 days", "a1b22c333d4444",
  // whitespace runs
  "a  b", "a   b", "a    b c", " leading", "   three leading", "trailing ", "trailing   ", "\ttab\t\tdouble",
  "line1\nline2", "line1\n\nline2", "a\r\nb\r\n", " \n \n ", "\n\n\n", "x \n y", "end\n", "   ", " ", "",
  "\u00a0nbsp\u00a0here", "ideographic\u3000space", "mixed \t \n\t spaces", "    indented\n        more",
  // unicode
  "naïve café résumé", "e\u0301 vs \u00e9 (decomposed vs composed)", "A\u030angstr\u00f6m", "你好，世界！",
  "日本語のテキストです。", "한국어 텍스트", "Привет, мир", "Γειά σου Κόσμε", "مرحبا بالعالم", "नमस्ते दुनिया",
  "emoji 👍🏽 🎉 🦙 👨‍👩‍👧", "math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑∫√ ≠ ≤", "rare 龘 𪚥 𠀋", "ﬁ ligature ｆｕｌｌ width", "\u200bzero\u200bwidth",
  // code and markup
  "def f(x):\n    return x**2  # square\n", "if (a != b) { return -1; }", "<div class=\"x\">&amp;</div>",
  "https://example.com/path?q=1&r=2#frag", "foo_bar-baz.qux/quux", "!!!???...,,,;;;", "$$ %% ^^ && ** (( ))",
  // long words and runs (the BPE heap path)
  "a".repeat(300), " ".repeat(100) + "x", "ab".repeat(150), "-".repeat(80), "\n".repeat(40) + "z",
  "Antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
  "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore " +
    "magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo.",
];
const specials = {
  llama3: ["<|begin_of_text|>Hi<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
           "text<|reserved_special_token_5|>more", "<|eot_id|><|eot_id|>", "a <|end_of_text|> b"],
  qwen3: ["<|im_start|>user\nhi<|im_end|>\n", "<think>\nhmm\n</think>\n\nanswer", "<tool_call>x</tool_call>",
          "<|endoftext|>", "a <|im_end|> b"],
  llama2: ["<s>[INST] hi [/INST] ok </s>", "Hello</s>world <s> x", "</s>", "a <unk> b"],
};

// Deterministic fuzz strings over a mixed alphabet (mulberry32).
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const alphabet = [..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", ..."      \n\n\t\r",
  ..."'''.,;:!?-_()[]{}<>/\\\"#@&*+=|~`^%$", ..."éèêëàâäôöûüçñßøåæœ", ..."你好世界中文字", ..."こんにちはカタカナ",
  ..."абвгдежзийклмн", ..."αβγδεζηθ", ..."٠١٢٣٤", ..."½²³Ⅻ", "👍", "🎉", "🦙", "\u0301", "\u0308", "\u00a0", "\u3000", "龘"];
const r = rng(20240601);
const fuzz = [];
for (let i = 0; i < 150; ++i) {
  const n = 1 + Math.floor(r() * 40);
  let s = "";
  for (let k = 0; k < n; ++k) s += alphabet[Math.floor(r() * alphabet.length)];
  fuzz.push(s);
}

// ---- Chat templates, written from the model cards' formats -------------------
const conversations = [
  [{ role: "user", content: "What is 2+2?" }, { role: "assistant", content: "4" }],
  [{ role: "system", content: "You are terse." }, { role: "user", content: "Name a color." },
   { role: "assistant", content: "Blue." }, { role: "user", content: "Another one?" },
   { role: "assistant", content: "Red, or maybe green." }],
  [{ role: "user", content: "Traduis « bonjour » en 日本語." }, { role: "assistant", content: "こんにちは — konnichiwa!" }],
  [{ role: "user", content: "Write code:\nx = 1" }, { role: "assistant", content: "def f(x):\n    return x + 1" }],
  [{ role: "user", content: "Reverse: abc123" }, { role: "assistant", content: "321cba" }],
];
const render = {
  // Meta's Llama-3 chat format (the tokenizer_config chat_template: content | trim).
  llama3: (ms) => "<|begin_of_text|>" + ms.map((m) =>
    "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content.trim() + "<|eot_id|>").join(""),
  // ChatML as Qwen2/2.5 use it (no BOS).
  chatml: (ms) => ms.map((m) => "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n").join(""),
  // HF's Llama-2 chat template: system folded into the first user turn.
  llama2: (ms) => {
    let sys = null;
    if (ms[0].role === "system") { sys = ms[0].content; ms = ms.slice(1); }
    return ms.map((m, i) => {
      if (m.role === "user") {
        const c = i === 0 && sys !== null ? "<<SYS>>\n" + sys + "\n<</SYS>>\n\n" + m.content : m.content;
        return "<s>[INST] " + c.trim() + " [/INST]";
      }
      return " " + m.content.trim() + " </s>";
    }).join("");
  },
};
const template_for = { llama3: "llama3", qwen3: "chatml", llama2: "llama2" };

fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, "corpus.json"), JSON.stringify({ cases: [...cases, ...fuzz], conversations }, null, 0) + "\n");
let failed = 0;
for (const name of ["llama3", "qwen3", "llama2"]) {
  const pkg = `@lenml/tokenizer-${name}`;
  const mdir = path.join(nm, pkg, "models");
  const tj = JSON.parse(fs.readFileSync(path.join(mdir, "tokenizer.json")));
  const tc = JSON.parse(fs.readFileSync(path.join(mdir, "tokenizer_config.json")));
  const hf = new Tokenizer(tj, tc);
  const second = require(pkg).fromPreTrained();
  const version = JSON.parse(fs.readFileSync(path.join(nm, pkg, "package.json"))).version;
  const enc = (t) => {
    const a = Array.from(hf.encode(t, { add_special_tokens: false }).ids);
    const b = Array.from(second.encode(t, { add_special_tokens: false }));
    if (JSON.stringify(a) !== JSON.stringify(b)) {
      console.error(`${name}: references disagree on ${JSON.stringify(t)}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
      ++failed;
    }
    return a;
  };
  const all = [...cases, ...specials[name], ...fuzz];
  const g = {
    tokenizer: `${pkg}@${version} models/tokenizer.json`,
    reference: "@huggingface/tokenizers encode(text, {add_special_tokens: false}), equal to @lenml/tokenizers",
    cases: all.map((t) => ({ text: t, ids: enc(t) })),
    templates: conversations.map((ms) => {
      const text = render[template_for[name]](ms);
      return { template: template_for[name], messages: ms, text, ids: enc(text) };
    }),
  };
  fs.writeFileSync(path.join(out, `${name}.json`), JSON.stringify(g) + "\n");
  console.log(`tokenizer_goldens: ${name}: ${g.cases.length} cases, ${g.templates.length} templates`);
}
if (failed) { console.error(`tokenizer_goldens: ${failed} disagreements between the references`); process.exit(1); }
