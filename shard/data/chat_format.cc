#include "shard/data/chat_format.h"

namespace shard {

std::string ChatFormat::Name() const { return hf ? hf->Fingerprint() : ChatTemplateName(*named); }

std::string ChatFormat::Describe() const { return hf ? "chat_template of " + hf->origin() : ChatTemplateName(*named); }

Status ChatFormat::CheckTokens(const Tokenizer& tok) const { return hf ? OkStatus() : CheckTemplateTokens(*named, tok); }

Status ChatFormat::Apply(const std::vector<Message>& messages, const Tokenizer& tok, TrainOn train_on,
                         TokenizedSample* out) const {
  return hf ? hf->Apply(messages, tok, train_on, out) : ApplyChatTemplate(*named, messages, tok, train_on, out);
}

StatusOr<ChatFormat> ResolveChatFormat(const std::string& spec, const std::string& tokenizer) {
  ChatFormat f;
  if (spec == "auto" && !HfChatTemplate::Available(tokenizer)) {
    f.named = ChatTemplate::kPlain;
    return f;
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
