#include "shard/spec/hf_config_export.h"

#include <nlohmann/json.hpp>

namespace shard {
namespace {

StatusOr<nlohmann::ordered_json> ParseObject(const std::string& text, const std::string& where) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(where + " is not a JSON object");
  return j;
}

}  // namespace

const char* TorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

StatusOr<std::string> ExportedHfConfigJson(const LlamaConfig& model, const std::string& source_config, DType dtype,
                                           const std::string& where) {
  const std::string engine_text = model.ToHfConfigJson();
  ASSIGN_OR_RETURN(nlohmann::ordered_json engine, ParseObject(engine_text, "the engine's config"));
  nlohmann::ordered_json out = engine;
  if (!source_config.empty()) {
    ASSIGN_OR_RETURN(out, ParseObject(source_config, where));
    ASSIGN_OR_RETURN(LlamaConfig source, LlamaConfigFromHfJson(source_config, where));
    // The engine's reading of the source equals its model: nothing that
    // defines the model changed, so the source stands as it is. Otherwise the
    // engine's keys say what the model now is.
    if (source.ToHfConfigJson() != engine_text)
      for (const auto& [key, value] : engine.items()) out[key] = value;
  }
  out["torch_dtype"] = TorchDTypeName(dtype);
  if (out.contains("dtype")) out["dtype"] = TorchDTypeName(dtype);  // transformers >= 4.56 spelling
  return out.dump(2) + "\n";
}

StatusOr<std::string> GenerationConfigFromModelConfig(const std::string& config_json, const std::string& where) {
  ASSIGN_OR_RETURN(nlohmann::ordered_json config, ParseObject(config_json, where));
  nlohmann::ordered_json gen = {{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"})
    if (config.contains(key) && !config[key].is_null()) gen[key] = config[key];
  return gen.dump(2) + "\n";
}

}  // namespace shard
