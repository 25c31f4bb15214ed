#include "shard/data/chat_format.h"

#include <new>
#include <span>
#include <stdexcept>

namespace shard {

std::string ChatFormat::Name() const { return hf ? hf->Fingerprint() : ChatTemplateName(*named); }

std::string ChatFormat::Describe() const { return hf ? "chat_template of " + hf->origin() : ChatTemplateName(*named); }

Status ChatFormat::CheckTokens(const Tokenizer& tok) const { return hf ? OkStatus() : CheckTemplateTokens(*named, tok); }

Status ChatFormat::Apply(const std::vector<Message>& messages, const Tokenizer& tok, TrainOn train_on,
                         TokenizedSample* out) const {
  // The boundary of the template engine and the tokenizer: an exception from
  // a library inside them (an allocation that failed) is this row's error,
  // never one that ends a prepare thread and with it the process.
  try {
    return hf ? hf->Apply(messages, tok, train_on, out) : ApplyChatTemplate(*named, messages, tok, train_on, out);
  } catch (const std::bad_alloc&) {
    return InvalidArgument("out of memory rendering and tokenizing the conversation with " + Describe());
  } catch (const std::exception& e) {
    return InvalidArgument("rendering and tokenizing the conversation with " + Describe() + ": " + e.what());
  }
}

StatusOr<std::optional<int32_t>> ChatFormat::TurnEnd(const Tokenizer& tok) const {
  // A reply that ends in plain text: what the template trains after it.
  const std::vector<Message> turn = {{Role::kUser, "Hi"}, {Role::kAssistant, "Hello there"}};
  TokenizedSample s;
  RETURN_IF_ERROR(Apply(turn, tok, TrainOn::kAssistant, &s));
  int64_t last = -1;
  for (size_t i = 0; i < s.mask.size(); ++i)
    if (s.mask[i]) last = static_cast<int64_t>(i);
  if (last < 0) return std::optional<int32_t>();
  const int32_t id = s.tokens[last];
  if (tok.eos_id() && id == *tok.eos_id()) return std::optional<int32_t>(id);
  // Only a special token ("<|eot_id|>", "<|im_end|>", "<end_of_turn>") ends a
  // turn: a template that closes replies with plain text ("</a>") or nothing
  // would make generation stop at an ordinary character or word.
  const std::string text = tok.Decode(std::span<const int32_t>(&id, 1));
  const bool special = text.size() > 2 && text.front() == '<' && text.back() == '>' && tok.TokenId(text) == id;
  return special ? std::optional<int32_t>(id) : std::optional<int32_t>();
}

StatusOr<ChatFormat> ResolveChatFormat(const std::string& spec, const std::string& tokenizer) {
  ChatFormat f;
  if (spec == "auto") {
    // No chat_template at all: plain. A malformed one is the error `hf` gives.
    ASSIGN_OR_RETURN(bool has, HfChatTemplate::HasTemplate(tokenizer));
    if (!has) {
      f.named = ChatTemplate::kPlain;
      return f;
    }
  }
  if (spec == "auto" || spec == "hf" || spec.rfind("hf:", 0) == 0) {
    if (tokenizer.empty() || tokenizer == "byte")
      return InvalidArgument("template '" + spec + "' needs a tokenizer folder with a chat_template, not the byte tokenizer");
    ASSIGN_OR_RETURN(f.hf, HfChatTemplate::Load(tokenizer, spec.rfind("hf:", 0) == 0 ? spec.substr(3) : ""));
    return f;
  }
  auto t = ParseChatTemplate(spec);
  if (!t.ok())
    return InvalidArgument("template '" + spec + "' is not one of auto, hf, hf:NAME, plain, llama2, llama3, chatml");
  f.named = *t;
  return f;
}

}  // namespace shard
