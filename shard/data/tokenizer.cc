#include "shard/data/tokenizer.h"

#include <filesystem>

#include "shard/data/byte_tokenizer.h"
#include "shard/data/hf_tokenizer.h"
#include "shard/data/sentencepiece_tokenizer.h"

namespace shard {

StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& spec) {
  namespace fs = std::filesystem;
  if (spec == "byte") return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  if (spec.empty()) return InvalidArgument("no tokenizer given (use byte, a tokenizer.json, a .model file or a folder)");
  std::error_code ec;
  fs::path p(spec);
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "tokenizer.json")) p /= "tokenizer.json";
    else if (fs::exists(p / "tokenizer.model")) p /= "tokenizer.model";
    else return NotFound("tokenizer folder " + spec + " holds neither tokenizer.json nor tokenizer.model");
  } else if (!fs::exists(p, ec)) {
    return NotFound("tokenizer " + spec + " does not exist (use byte, a tokenizer.json, a .model file or a folder)");
  }
  if (p.extension() == ".json") {
    ASSIGN_OR_RETURN(auto t, HfTokenizer::Load(p.string()));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  ASSIGN_OR_RETURN(auto t, SentencePieceTokenizer::Load(p.string()));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace shard
