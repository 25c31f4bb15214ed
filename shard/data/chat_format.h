// Which chat template a dataset is rendered with: one of the named templates
// (plain, llama2, llama3, chatml; chat_template.h) or the model's own Jinja
// template (hf_chat_template.h).
//
//   auto      the tokenizer folder's chat_template when it has one, else plain
//             (the default of data.template and prepare-data --template); a
//             malformed chat_template is the error hf gives, never plain
//   hf        the tokenizer folder's chat_template; an error when it has none
//   hf:NAME   one of a list of named chat templates (e.g. hf:tool_use)
//
// Thread-safety: immutable after ResolveChatFormat.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/data/chat_template.h"
#include "shard/data/hf_chat_template.h"
#include "shard/spec/data_config.h"

namespace shard {

struct ChatFormat {
  std::optional<ChatTemplate> named;
  std::shared_ptr<const HfChatTemplate> hf;

  // "plain" … or "jinja:<hash>" (what a prepared dataset records).
  std::string Name() const;
  // A short description for logs: "llama3" or "chat_template of DIR/tokenizer_config.json".
  std::string Describe() const;
  Status CheckTokens(const Tokenizer& tok) const;
  Status Apply(const std::vector<Message>& messages, const Tokenizer& tok, TrainOn train_on, TokenizedSample* out) const;
  // The token that ends an assistant turn under this format — what a model
  // fine-tuned on it learns to emit when its reply is done (EOS for plain and
  // llama2, <|eot_id|> for llama3, <|im_end|> for chatml, whatever the
  // model's own template puts there): the last trained token of a one-turn
  // conversation. nullopt when the reply's last trained token is its text.
  StatusOr<std::optional<int32_t>> TurnEnd(const Tokenizer& tok) const;
};

// IsChatFormatSpec (shard/spec/data_config.h) checks the spellings
// ResolveChatFormat accepts without reading files.
StatusOr<ChatFormat> ResolveChatFormat(const std::string& spec, const std::string& tokenizer);

}  // namespace shard
