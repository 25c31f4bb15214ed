// config.json of an exported HF folder, per family: the source's keys and
// values kept (only torch_dtype changes), a preset's generated config, and
// the generation config save_pretrained would derive.
#include "shard/spec/hf_config_export.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

namespace shard {
namespace {

using nlohmann::json;

// Published-style config.json files (tiny shapes), with the keys the engine
// does not read: bos/eos ids, initializer_range, use_cache, attention_dropout,
// sliding_window/max_window_layers with use_sliding_window false, ...
json Source(const std::string& family) {
  json j = {{"model_type", family},
            {"vocab_size", 320},
            {"hidden_size", 64},
            {"intermediate_size", 128},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"hidden_act", "silu"},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 10000.0},
            {"max_position_embeddings", 512},
            {"tie_word_embeddings", true},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"initializer_range", 0.02},
            {"use_cache", true},
            {"attention_dropout", 0.0},
            {"torch_dtype", "bfloat16"},
            {"transformers_version", "4.44.0"}};
  if (family == "llama") j["architectures"] = {"LlamaForCausalLM"}, j["pretraining_tp"] = 1, j["mlp_bias"] = false;
  if (family == "mistral") j["architectures"] = {"MistralForCausalLM"}, j["sliding_window"] = nullptr;
  if (family == "qwen2" || family == "qwen3") {
    j["architectures"] = {family == "qwen2" ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM"};
    j["use_sliding_window"] = false;
    j["sliding_window"] = 4096;
    j["max_window_layers"] = 28;
  }
  if (family == "qwen3") j["head_dim"] = 16, j["attention_bias"] = false;
  return j;
}

TEST(HfConfigExportTest, EveryFamilyKeepsTheSourceKeysAndValuesButTheDtype) {
  for (const std::string family : {"llama", "mistral", "qwen2", "qwen3"}) {
    SCOPED_TRACE(family);
    const json src = Source(family);
    auto model = LlamaConfigFromHfJson(src.dump(), "src");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    auto text = ExportedHfConfigJson(*model, src.dump(2), DType::kF32, "src");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    const json out = json::parse(*text);
    std::set<std::string> src_keys, out_keys;
    for (const auto& [k, v] : src.items()) src_keys.insert(k);
    for (const auto& [k, v] : out.items()) out_keys.insert(k);
    EXPECT_EQ(out_keys, src_keys);
    for (const auto& [k, v] : src.items())
      if (k != "torch_dtype") {
        EXPECT_EQ(out.at(k), v) << k;
      }
    EXPECT_EQ(out.at("torch_dtype"), "float32");
    // What the export wrote reads back as the same model.
    auto back = LlamaConfigFromHfJson(*text, "export");
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->ToHfConfigJson(), model->ToHfConfigJson());
  }
}

TEST(HfConfigExportTest, APresetGetsTheGeneratedConfigWithItsDtype) {
  auto model = LlamaPreset("tiny");
  ASSERT_TRUE(model.ok());
  auto text = ExportedHfConfigJson(*model, "", DType::kBF16, "preset");
  ASSERT_TRUE(text.ok());
  json want = json::parse(model->ToHfConfigJson());
  want["torch_dtype"] = "bfloat16";
  EXPECT_EQ(json::parse(*text), want);
}

TEST(HfConfigExportTest, AChangedModelTakesTheEnginesKeysAndKeepsTheRest) {
  json src = Source("qwen2");
  auto model = LlamaConfigFromHfJson(src.dump(), "src");
  ASSERT_TRUE(model.ok());
  model->num_layers = 3;  // what the engine's model now is
  auto text = ExportedHfConfigJson(*model, src.dump(), DType::kF32, "src");
  ASSERT_TRUE(text.ok());
  const json out = json::parse(*text);
  EXPECT_EQ(out.at("num_hidden_layers"), 3);
  EXPECT_EQ(out.at("eos_token_id"), 2);
  EXPECT_EQ(out.at("initializer_range"), 0.02);
}

TEST(HfConfigExportTest, ASourceThatIsNotAConfigIsNamed) {
  auto model = LlamaPreset("tiny");
  ASSERT_TRUE(model.ok());
  auto bad = ExportedHfConfigJson(*model, "[1]", DType::kF32, "hf/config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hf/config.json"), std::string::npos) << bad.status().ToString();
}

TEST(HfConfigExportTest, GenerationConfigIsDerivedFromTheModelConfig) {
  auto gen = GenerationConfigFromModelConfig(R"({"bos_token_id": 1, "eos_token_id": [2, 3], "pad_token_id": null})",
                                             "config.json");
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(json::parse(*gen), json::parse(R"({"_from_model_config": true, "bos_token_id": 1, "eos_token_id": [2, 3]})"));
  gen = GenerationConfigFromModelConfig("{}", "config.json");
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(json::parse(*gen), json::parse(R"({"_from_model_config": true})"));
}

}  // namespace
}  // namespace shard
