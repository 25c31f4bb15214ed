// Which chat template a dataset is rendered with: one of the named templates
// (plain, llama2, llama3, chatml; chat_template.h) or the model's own Jinja
// template (hf_chat_template.h).
//
//   auto      the tokenizer folder's chat_template when it has one, else plain
//             (the default of data.template and prepare-data --template)
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
};

// IsChatFormatSpec (shard/spec/data_config.h) checks the spellings
// ResolveChatFormat accepts without reading files.
StatusOr<ChatFormat> ResolveChatFormat(const std::string& spec, const std::string& tokenizer);

}  // namespace shard
