#include "shard/data/tokenizer_export.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "shard/common/file_util.h"
#include "shard/data/tokenizer.h"

namespace shard {

StatusOr<std::vector<std::string>> ExportTokenizerFiles(const std::string& tokenizer, const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> written;
  if (tokenizer.empty() || tokenizer == "byte") return written;
  ASSIGN_OR_RETURN(auto tok, LoadTokenizer(tokenizer));
  std::error_code ec;
  const fs::path src = fs::is_directory(tokenizer, ec) ? fs::path(tokenizer) : fs::path(tokenizer).parent_path();
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                           "chat_template.jinja"}) {
    if (!fs::exists(src / name, ec)) continue;
    ASSIGN_OR_RETURN(std::string bytes, ReadFileToString((src / name).string()));
    RETURN_IF_ERROR(WriteFileAtomic((fs::path(out_dir) / name).string(), bytes));
    written.push_back(name);
  }
  nlohmann::json gen = {{"_from_model_config", true}};
  if (auto b = tok->bos_id()) gen["bos_token_id"] = *b;
  if (auto e = tok->eos_id()) gen["eos_token_id"] = *e;
  RETURN_IF_ERROR(WriteFileAtomic((fs::path(out_dir) / "generation_config.json").string(), gen.dump(2) + "\n"));
  written.push_back("generation_config.json");
  return written;
}

}  // namespace shard
