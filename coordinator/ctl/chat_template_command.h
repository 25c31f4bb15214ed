// shardctl chat-template: prints a conversation rendered by a tokenizer
// folder's chat template, exactly as transformers'
// apply_chat_template(messages, tokenize=False, add_generation_prompt=...) does,
// so users can check what their data turns into.
#pragma once

#include <string>

#include "shard/common/status.h"

namespace shardctl {

struct ChatTemplateOptions {
  std::string tokenizer;               // --tokenizer DIR (or a tokenizer.json / .model)
  std::string messages;                // --messages FILE.json: [{role, content}, ...] or {"messages": [...], extra vars}
  bool add_generation_prompt = false;  // --add-generation-prompt
  std::string chat_template = "auto";  // --template auto | hf | hf:NAME | plain | llama2 | llama3 | chatml
};

// The rendered text (no newline added).
shard::StatusOr<std::string> RenderChatTemplateText(const ChatTemplateOptions& o);
shard::Status RunChatTemplate(const ChatTemplateOptions& o);

}  // namespace shardctl
