#include "shard/data/tokenizer_export.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "shard/common/file_util.h"
#include "shard/data/chat_format.h"
#include "shard/data/generation_config.h"
#include "shard/data/tokenizer.h"
#include "shard/spec/hf_config_export.h"

namespace shard {
namespace {

// What goes along from a tokenizer (or model) folder, as transformers'
// save_pretrained writes them.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json",
                                           "tokenizer.model", "chat_template.jinja",   "generation_config.json"};

}  // namespace

StatusOr<std::vector<std::string>> ExportTokenizerFiles(const std::string& tokenizer, const std::string& out_dir,
                                                        const std::vector<int32_t>& stop_ids) {
  namespace fs = std::filesystem;
  std::vector<std::string> written;
  if (tokenizer.empty() || tokenizer == "byte") return written;
  ASSIGN_OR_RETURN(auto tok, LoadTokenizer(tokenizer));
  std::error_code ec;
  const fs::path src = fs::is_directory(tokenizer, ec) ? fs::path(tokenizer) : fs::path(tokenizer).parent_path();
  for (const char* name : kTokenizerFiles) {
    if (name == std::string("generation_config.json")) continue;  // merged below
    if (!fs::exists(src / name, ec)) continue;
    ASSIGN_OR_RETURN(std::string bytes, ReadFileToString((src / name).string()));
    RETURN_IF_ERROR(WriteFileAtomic((fs::path(out_dir) / name).string(), bytes));
    written.push_back(name);
  }
  nlohmann::ordered_json gen = {{"_from_model_config", true}};
  // eos_token_id: an id or a list (transformers reads both); ids appended in order, once each.
  std::vector<int32_t> eos;
  if (fs::exists(src / "generation_config.json", ec)) {  // the model's own: sampling defaults, its eos list
    const std::string path = (src / "generation_config.json").string();
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    ASSIGN_OR_RETURN(eos, GenerationEosIds(text, path, tok->vocab_size()));
    gen = nlohmann::ordered_json::parse(text);  // an object: GenerationEosIds checked
  }
  if (auto b = tok->bos_id(); b && !gen.contains("bos_token_id")) gen["bos_token_id"] = *b;
  std::vector<int32_t> add = stop_ids;
  if (auto e = tok->eos_id()) add.insert(add.begin(), *e);
  for (int32_t id : add)
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  if (eos.size() == 1) gen["eos_token_id"] = eos[0];
  if (eos.size() > 1) gen["eos_token_id"] = eos;
  RETURN_IF_ERROR(WriteFileAtomic((fs::path(out_dir) / "generation_config.json").string(), gen.dump(2) + "\n"));
  written.push_back("generation_config.json");
  return written;
}

StatusOr<std::vector<std::string>> ExportChatTokenizer(const std::string& tokenizer, const std::string& chat_template,
                                                       const std::string& out_dir) {
  if (tokenizer.empty() || tokenizer == "byte") return std::vector<std::string>();
  ASSIGN_OR_RETURN(auto tok, LoadTokenizer(tokenizer));
  ASSIGN_OR_RETURN(ChatFormat format, ResolveChatFormat(chat_template, tokenizer));
  ASSIGN_OR_RETURN(std::optional<int32_t> turn_end, format.TurnEnd(*tok));
  std::vector<int32_t> stop;
  if (turn_end) stop.push_back(*turn_end);
  return ExportTokenizerFiles(tokenizer, out_dir, stop);
}

StatusOr<std::vector<std::string>> ExportJobTokenizer(const DataConfig& data, const std::string& from_hf,
                                                      int64_t model_vocab_size, const std::string& out_dir) {
  namespace fs = std::filesystem;
  if (data.sft()) return ExportChatTokenizer(data.tokenizer, data.chat_template, out_dir);
  std::vector<std::string> written;
  const std::string spec = data.tokenizer.empty() ? from_hf : data.tokenizer;
  if (spec.empty() || spec == "byte") return written;
  // The files as they are: no chat template adds a stop id, and nothing read
  // this tokenizer before (a token file holds ids), so nothing is re-derived.
  std::error_code ec;
  const fs::path src = fs::is_directory(spec, ec) ? fs::path(spec) : fs::path(spec).parent_path();
  for (const char* name : kTokenizerFiles) {
    if (!fs::exists(src / name, ec)) continue;
    ASSIGN_OR_RETURN(std::string bytes, ReadFileToString((src / name).string()));
    if (name == std::string("generation_config.json"))
      RETURN_IF_ERROR(GenerationEosIds(bytes, (src / name).string(), model_vocab_size).status());
    RETURN_IF_ERROR(WriteFileAtomic((fs::path(out_dir) / name).string(), bytes));
    written.push_back(name);
  }
  return written;
}

StatusOr<std::vector<std::string>> WriteExportedConfigs(const std::string& out_dir, const LlamaConfig& model,
                                                        const std::string& source_config, DType dtype,
                                                        const std::vector<std::string>& tokenizer_files) {
  namespace fs = std::filesystem;
  std::vector<std::string> written;
  ASSIGN_OR_RETURN(std::string config, ExportedHfConfigJson(model, source_config, dtype, "the source config.json"));
  RETURN_IF_ERROR(WriteFileAtomic((fs::path(out_dir) / "config.json").string(), config));
  written.push_back("config.json");
  const fs::path gen = fs::path(out_dir) / "generation_config.json";
  // The model's own, or the tokenizer's (ExportTokenizerFiles), when written.
  if (std::find(tokenizer_files.begin(), tokenizer_files.end(), "generation_config.json") != tokenizer_files.end())
    return written;
  ASSIGN_OR_RETURN(std::string text, GenerationConfigFromModelConfig(config, "config.json"));
  RETURN_IF_ERROR(WriteFileAtomic(gen.string(), text));
  written.push_back("generation_config.json");
  return written;
}

}  // namespace shard
