// Chat templates: a conversation becomes token ids plus a per-token loss mask.
//
//   plain   [BOS] content… — each assistant reply followed by EOS (trained)
//   llama2  <s>[INST] (<<SYS>>\n…\n<</SYS>>\n\n)user [/INST] reply </s>   (HF's Llama-2 template)
//   llama3  <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>…
//           (the text Llama 3/3.1's shipped chat_template renders, content trimmed; that
//           template adds no default system header — tested against it)
//   chatml  <|im_start|>role\ncontent<|im_end|>\n…     (plain ChatML: no default system prompt and
//           no <think> handling, so not Qwen2.5's or Qwen3's own template; use template: auto)
//
// mask[i] = 1 when token i is a target (predicted from token i-1). With
// train_on = assistant only a reply's content and its end marker (EOS,
// <|eot_id|>, <|im_end|>) are targets; with all, every token is.
//
// Text between special tokens is encoded one piece at a time, and a piece
// never spans a prompt/reply boundary, so no token mixes the two. Special
// tokens go in by id; on real tokenizers the ids equal the reference encoding of
// the rendered text (tested against goldens).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shard/common/status.h"
#include "shard/data/tokenizer.h"
#include "shard/spec/data_config.h"

namespace shard {

enum class Role { kSystem, kUser, kAssistant };
StatusOr<Role> ParseRole(std::string_view s);
const char* RoleName(Role r);

struct Message {
  Role role = Role::kUser;
  std::string content;
};

enum class ChatTemplate { kPlain, kLlama2, kLlama3, kChatml };
StatusOr<ChatTemplate> ParseChatTemplate(std::string_view s);
const char* ChatTemplateName(ChatTemplate t);

struct TokenizedSample {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  int64_t targets() const;  // mask bits set after the first token
};

// INVALID_ARGUMENT when the tokenizer lacks a special token the template needs
// (bad input a retry cannot mend: a job fails at once, worker/agent.cc).
Status CheckTemplateTokens(ChatTemplate t, const Tokenizer& tok);

// Renders and tokenizes one conversation. INVALID_ARGUMENT names the problem
// (no assistant reply to train on, llama2 turns that do not alternate).
Status ApplyChatTemplate(ChatTemplate t, const std::vector<Message>& messages, const Tokenizer& tok, TrainOn train_on,
                         TokenizedSample* out);

// The rendered text (special tokens spelled out), for tests and debugging.
StatusOr<std::string> RenderChatTemplate(ChatTemplate t, const std::vector<Message>& messages, const Tokenizer& tok);

}  // namespace shard
