#include "shard/spec/data_config.h"

#include <filesystem>


namespace shard {

bool IsChatFormatSpec(const std::string& spec) {
  if (spec == "auto" || spec == "hf" || spec.rfind("hf:", 0) == 0) return true;
  for (const char* named : kNamedChatTemplates)
    if (spec == named) return true;
  return false;
}

Status DataConfig::Validate() const {
  if (tokens.empty() == jsonl.empty())
    return InvalidArgument(tokens.empty() ? "data.tokens or data.jsonl is required (a raw uint32 token file, or SFT JSONL)"
                                          : "data.tokens and data.jsonl are both set; a job reads one of them");
  if (seq_len <= 0) return InvalidArgument("data.seq_len must be > 0");
  if (sft() && tokenizer.empty()) return InvalidArgument("data.tokenizer must name a tokenizer (e.g. byte)");
  if (!IsChatFormatSpec(chat_template))
    return InvalidArgument("data.template '" + chat_template +
                           "' is not one of auto, hf, hf:NAME, plain, llama2, llama3, chatml");
  return OkStatus();
}

Status DataConfig::ResolveTokenizer(const std::string& from_hf) {
  if (!sft() || !tokenizer.empty()) return OkStatus();
  tokenizer_from_model = true;
  if (from_hf.empty()) {
    tokenizer = "byte";
    return OkStatus();
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir(from_hf);
  if (fs::is_directory(dir, ec) && !fs::exists(dir / "tokenizer.json", ec) && !fs::exists(dir / "tokenizer.model", ec))
    return InvalidArgument("data.tokenizer is not set and model.from_hf " + from_hf +
                           " holds no tokenizer.json or tokenizer.model; set data.tokenizer to the model's tokenizer "
                           "(a folder or file), or data.tokenizer: byte to train on byte ids");
  tokenizer = from_hf;
  return OkStatus();
}

Status DataConfig::CheckTokenizerFitsModel(int64_t model_vocab_size) const {
  if (!sft() || !tokenizer_from_model || tokenizer != "byte") return OkStatus();
  const int64_t byte_vocab = kByteTokenizerVocabSize;
  if (model_vocab_size == byte_vocab) return OkStatus();
  return InvalidArgument("data.tokenizer is not set, so the byte tokenizer (" + std::to_string(byte_vocab) +
                         " ids) would feed a model with vocab_size " + std::to_string(model_vocab_size) +
                         "; set data.tokenizer to the model's tokenizer folder, or data.tokenizer: byte to use "
                         "byte ids anyway");
}

}  // namespace shard
