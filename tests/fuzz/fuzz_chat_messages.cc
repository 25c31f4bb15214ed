// The chat-messages readers: the input as a `--messages` file (shardctl
// chat-template and generate: an array of messages, or an object with a
// "messages" array and extra template variables) rendered by a tokenizer
// folder's chat template, and as one SFT JSONL row rendered, tokenized and
// masked by the same template (the prefix renderings and the in-turn search
// of issue 28 item 4). The template rewrites earlier replies and drops think
// blocks, so the mask's fallback runs too.
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "coordinator/ctl/chat_template_command.h"
#include "shard/data/byte_tokenizer.h"
#include "shard/data/hf_chat_template.h"
#include "shard/data/sft_jsonl.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// A ChatML template with tools, think blocks dropped from earlier replies
// (Qwen3's behaviour, condensed) and earlier replies prefixed.
constexpr const char* kTemplate =
    "{%- if tools %}<|im_start|>system\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{%- set ns = namespace(last=-1) %}"
    "{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
    "{%- for m in messages %}"
    "{%- set content = m.content if m.content is string else '' %}"
    "{%- if m.role == 'assistant' %}"
    "{%- if '</think>' in content %}{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
    "{%- if loop.index0 < ns.last %}<|im_start|>assistant\n(earlier) {{ content | trim }}<|im_end|>\n"
    "{%- else %}<|im_start|>assistant\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ content }}<|im_end|>\n{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

const std::string& Folder() {
  static const std::string* d = [] {
    auto* dir = new std::string(shard::fuzz::ScratchDir() + "/tok");
    std::filesystem::create_directories(*dir);
    const std::string cfg = nlohmann::ordered_json{{"chat_template", kTemplate}, {"eos_token", "<|im_end|>"}}.dump();
    shard::fuzz::WriteScratch("tok/tokenizer_config.json", reinterpret_cast<const uint8_t*>(cfg.data()), cfg.size());
    return dir;
  }();
  return *d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardctl::ChatTemplateOptions o;
  o.tokenizer = Folder();
  o.messages = shard::fuzz::WriteScratch("messages.json", data, size);
  o.add_generation_prompt = size % 2 == 1;
  auto text = shardctl::RenderChatTemplateText(o);
  shard::fuzz::CheckRefusal(text.status());

  static const auto tpl = *shard::HfChatTemplate::Load(Folder());
  auto row = shard::ParseSftRow(std::string_view(reinterpret_cast<const char*>(data), size));
  shard::fuzz::CheckRefusal(row.status());
  if (!row.ok()) return 0;
  static const shard::ByteTokenizer tok;
  shard::TokenizedSample s;
  for (shard::TrainOn on : {shard::TrainOn::kAssistant, shard::TrainOn::kAll}) {
    shard::Status st = tpl->Apply(*row, tok, on, &s);
    shard::fuzz::CheckRefusal(st);
    if (st.ok() && s.mask.size() != s.tokens.size()) __builtin_trap();
  }
  return 0;
}
