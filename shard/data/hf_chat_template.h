// The model's own chat template: tokenizer_config.json's `chat_template` (a
// string, or a list of {name, template} where "default" is used unless a name
// is asked for; a chat_template.jinja beside it also counts), rendered by the
// Jinja subset in shard/data/jinja with the special tokens transformers passes
// (bos_token, eos_token, unk_token, pad_token, ... as strings).
//
// Assistant-only loss masks come from the rendering: the byte ranges inside
// {% generation %} blocks when the template has them; otherwise each assistant
// message's span is found by rendering prefixes of the conversation (the text
// up to message i with add_generation_prompt, up to and including message i
// without) — a template that renders earlier messages differently once later
// ones exist (Qwen3 drops reasoning from earlier turns) has that reply's span
// found in the whole rendering, inside the reply's own turn (located by
// rendering markers in place of the replies, reply_turns.h): a reply the
// template rewrites (upper-cases, drops) is refused naming the message, never
// matched elsewhere (train_on: all, or a template with generation blocks, then).
// Text is tokenized one span at a time, so no token straddles a prompt/reply
// boundary.
//
// Thread-safety: immutable after Load; Render/Apply may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "shard/common/status.h"
#include "shard/data/chat_template.h"
#include "shard/data/jinja/template.h"
#include "shard/data/tokenizer.h"

namespace shard {

class HfChatTemplate {
 public:
  // tokenizer: a tokenizer folder, or a tokenizer.json / .model file whose
  // folder holds tokenizer_config.json. name: one of a list of named
  // templates ("" = "default"). NOT_FOUND when there is no chat_template.
  static StatusOr<std::shared_ptr<const HfChatTemplate>> Load(const std::string& tokenizer, const std::string& name = "");
  // From a template source and special tokens ({"bos_token": "<s>", ...}).
  static StatusOr<std::shared_ptr<const HfChatTemplate>> FromSource(const std::string& source,
                                                                    nlohmann::ordered_json special_tokens,
                                                                    std::string origin = "chat_template");
  // Whether the tokenizer's folder has a chat_template (for data.template:
  // auto): false only when it has none; a malformed one (not a string or a
  // list, entries without a string name and template, a list without
  // "default") is the error Load gives.
  static StatusOr<bool> HasTemplate(const std::string& tokenizer);
  // HasTemplate, with an error read as false.
  static bool Available(const std::string& tokenizer);

  // What apply_chat_template(messages, tokenize=False, add_generation_prompt=...)
  // returns. `extra` adds template variables (tools, enable_thinking, ...).
  StatusOr<jinja::Rendered> Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                   const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The rendered text and the [begin, end) byte ranges that are trained.
  struct Spans {
    std::string text;
    std::vector<std::pair<size_t, size_t>> trained;
  };
  StatusOr<Spans> AssistantSpans(const std::vector<Message>& messages) const;

  // Renders, tokenizes and masks a conversation (the Jinja counterpart of ApplyChatTemplate).
  Status Apply(const std::vector<Message>& messages, const Tokenizer& tok, TrainOn train_on, TokenizedSample* out) const;

  const std::string& source() const { return source_; }
  const std::string& origin() const { return origin_; }
  // "jinja:<xxh64 of the source, hex>": recorded in prepared datasets so a changed template re-prepares.
  std::string Fingerprint() const;
  bool has_generation_blocks() const { return has_generation_; }

 private:
  void EncodeWithSpecials(std::string_view text, const Tokenizer& tok, std::vector<int32_t>* ids) const;
  // The trained span of assistant message i (content `text`) in `full`, the
  // whole rendering, inside its turn (reply_turns.h; nullopt: not located);
  // `alone` renders the conversation through message i.
  StatusOr<std::pair<size_t, size_t>> ReplySpanInTurn(const std::string& full, const std::string& text, size_t i,
                                                      std::optional<std::pair<size_t, size_t>> turn,
                                                      const std::string& alone) const;

  std::string source_;
  std::string origin_;
  nlohmann::ordered_json special_tokens_;
  jinja::Template template_;
  bool has_generation_ = false;
};

nlohmann::ordered_json MessagesToJson(const std::vector<Message>& messages);

}  // namespace shard
