#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"
#include "shard/model/rope.h"
#include "shard/train/local_params.h"

namespace shard {
namespace {

TEST(LlamaConfigTest, PresetsHaveThePublishedParameterCounts) {
  // Published totals: Llama-2-7B 6,738,415,616; Llama-3-8B 8,030,261,248;
  // Llama-3-70B 70,553,706,496; Llama-3.2-1B (tied) 1,235,814,400.
  EXPECT_EQ(LlamaPreset("llama2-7b")->NumParams(), 6738415616);
  EXPECT_EQ(LlamaPreset("llama3-8b")->NumParams(), 8030261248);
  EXPECT_EQ(LlamaPreset("llama3-70b")->NumParams(), 70553706496);
  EXPECT_EQ(LlamaPreset("llama3.2-1b")->NumParams(), 1235814400);
  auto tiny = LlamaPreset("tiny");
  ASSERT_TRUE(tiny.ok());
  EXPECT_GT(tiny->NumParams(), 500000);
  EXPECT_LT(tiny->NumParams(), 1500000);
  EXPECT_TRUE(tiny->Validate().ok());
  auto bad = LlamaPreset("llama9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("known: tiny"), std::string::npos);
}

TEST(LlamaConfigTest, LayoutMatchesConfigAndIsContiguous) {
  for (const auto& name : LlamaPresetNames()) {
    LlamaConfig c = *LlamaPreset(name);
    ParamLayout l = ParamLayout::ForLlama(c);
    EXPECT_EQ(l.total_numel, c.NumParams()) << name;
    EXPECT_EQ(l.num_units(), c.num_layers + 2);
    for (const auto& u : l.units) {
      int64_t off = 0;
      for (const auto& t : u.tensors) {
        EXPECT_EQ(t.offset, off);
        off += t.numel;
      }
      EXPECT_EQ(off, u.numel);
    }
    // Fused GEMMs rely on q,k,v and gate,up being adjacent.
    const auto& b = l.units[1].tensors;
    EXPECT_EQ(b[kK].offset, b[kQ].offset + b[kQ].numel);
    EXPECT_EQ(b[kV].offset, b[kK].offset + b[kK].numel);
    EXPECT_EQ(b[kUp].offset, b[kGate].offset + b[kGate].numel);
  }
  int unit, tensor;
  ParamLayout l = ParamLayout::ForLlama(*LlamaPreset("tiny"));
  ASSERT_TRUE(l.Find("model.layers.2.mlp.up_proj.weight", &unit, &tensor));
  EXPECT_EQ(unit, 3);
  EXPECT_EQ(tensor, kUp);
  EXPECT_FALSE(l.Find("model.layers.9.mlp.up_proj.weight", &unit, &tensor));
}

TEST(LlamaConfigTest, HfJsonRoundTripAndErrors) {
  LlamaConfig c = *LlamaPreset("llama3.1-8b");
  auto back = LlamaConfigFromHfJson(c.ToHfConfigJson(), "config.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ShapeHash(), c.ShapeHash());
  EXPECT_EQ(back->rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(back->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(back->rope_theta, 500000.0);

  // A real Llama-2 style config (no num_key_value_heads -> MHA).
  auto l2 = LlamaConfigFromHfJson(R"({"model_type":"llama","vocab_size":32000,"hidden_size":4096,
      "intermediate_size":11008,"num_hidden_layers":32,"num_attention_heads":32,"rms_norm_eps":1e-05})",
                                  "l2.json");
  ASSERT_TRUE(l2.ok());
  EXPECT_EQ(l2->num_kv_heads, 32);

  auto missing = LlamaConfigFromHfJson(R"({"vocab_size":10})", "c.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("c.json: hidden_size is missing"), std::string::npos);
  EXPECT_FALSE(LlamaConfigFromHfJson("not json", "c.json").ok());
  auto gpt2 = LlamaConfigFromHfJson(R"({"model_type":"gpt2"})", "c.json");
  EXPECT_EQ(gpt2.status().code(), StatusCode::kUnimplemented);
  auto indiv = LlamaConfigFromHfJson(R"({"vocab_size":10,"hidden_size":30,"intermediate_size":8,
      "num_hidden_layers":1,"num_attention_heads":4})", "c.json");
  ASSERT_FALSE(indiv.ok());
  EXPECT_NE(indiv.status().message().find("not divisible"), std::string::npos);
}

// Issue 18 item 5: num_hidden_layers: 10000000 drove eval to 22 GB and plan /
// submit to bad_alloc. Sizes are bounded in Validate, and what inference would
// load is compared with this machine's memory before anything is allocated.
std::string Config(const std::string& layers, const std::string& hidden = "64", const std::string& vocab = "256",
                   const std::string& ffn = "128") {
  return R"({"vocab_size":)" + vocab + R"(,"hidden_size":)" + hidden + R"(,"intermediate_size":)" + ffn +
         R"(,"num_hidden_layers":)" + layers + R"(,"num_attention_heads":4})";
}

TEST(LlamaConfigTest, SizesThatWouldExhaustMemoryAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {Config("10000000"), "num_hidden_layers 10000000 is too large"},
      {Config("10000000000"), "num_hidden_layers 10000000000 is too large"},
      {Config("2", "64", "5000000000"), "vocab_size 5000000000 is too large"},
      {Config("2", "1048576"), "hidden_size 1048576 is too large"},
      {Config("2", "64", "256", "4000000"), "intermediate_size 4000000 is too large"},
      {Config("4000", "131072", "256", "1000000"), "more than shardd's bound"},
  };
  for (const auto& [json, needle] : cases) {
    SCOPED_TRACE(json);
    auto c = LlamaConfigFromHfJson(json, "big/config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("big/config.json"), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
  }
  EXPECT_TRUE(LlamaConfigFromHfJson(Config("126", "16384", "128256", "53248"), "405b.json").ok())
      << "the largest released Llama is within the bounds";
}

TEST(LlamaConfigTest, InferenceRefusesAModelThisMachineCannotHold) {
  // Within the bounds (3.7e12 parameters) but ~30 TB to load: refused before
  // any allocation, naming the folder and the memory.
  const std::string dir = ::testing::TempDir() + "/huge_model";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << Config("4000", "8192", "32000", "28672");
  auto m = LoadModelForInference(dir, "cpu");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted) << m.status().ToString();
  EXPECT_NE(m.status().message().find(dir + ": the model has"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("GB of host memory"), std::string::npos) << m.status().message();
  std::filesystem::remove_all(dir);
}

// factor 0 used to train on NaN frequencies (loss -nan, exit 0).
TEST(LlamaConfigTest, RopeScalingIsValidated) {
  const std::string head = R"({"vocab_size":32,"hidden_size":16,"intermediate_size":32,"num_hidden_layers":1,
      "num_attention_heads":2,"rope_scaling":)";
  auto parse = [&](const std::string& rs) { return LlamaConfigFromHfJson(head + rs + "}", "config.json"); };
  const std::string good = R"({"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
      "original_max_position_embeddings":8192})";
  ASSERT_TRUE(parse(good).ok()) << parse(good).status().ToString();
  for (const auto& [rs, part] : std::vector<std::pair<std::string, std::string>>{
           {R"({"rope_type":"llama3","factor":0})", "rope_scaling.factor must be a finite number > 0"},
           {R"({"rope_type":"llama3","factor":-2})", "rope_scaling.factor must be"},
           {R"({"rope_type":"llama3","factor":8,"low_freq_factor":0})", "rope_scaling.low_freq_factor"},
           {R"({"rope_type":"llama3","factor":8,"low_freq_factor":4,"high_freq_factor":4})",
            "rope_scaling.high_freq_factor must be finite and > low_freq_factor"},
           {R"({"rope_type":"llama3","factor":8,"original_max_position_embeddings":0})",
            "rope_scaling.original_max_position_embeddings must be > 0"},
           {R"({"rope_type":"llama3","factor":"8"})", "config.json: rope_scaling.factor must be a number"},
           {R"({"rope_type":7})", "config.json: rope_scaling.rope_type must be a string"}}) {
    auto c = parse(rs);
    ASSERT_FALSE(c.ok()) << rs;
    EXPECT_NE(c.status().message().find(part), std::string::npos) << c.status().ToString();
  }
}

TEST(RopeTest, InvFreqAndLlama3Scaling) {
  LlamaConfig c = *LlamaPreset("llama3-8b");
  auto plain = RopeInvFreq(c);
  ASSERT_EQ(plain.size(), 64u);
  EXPECT_DOUBLE_EQ(plain[0], 1.0);
  EXPECT_NEAR(plain[1], std::pow(500000.0, -2.0 / 128), 1e-15);
  LlamaConfig s = *LlamaPreset("llama3.1-8b");
  auto scaled = RopeInvFreq(s);
  // High frequencies (short wavelengths) are untouched, the lowest divided by 8.
  EXPECT_DOUBLE_EQ(scaled[0], plain[0]);
  EXPECT_NEAR(scaled[63], plain[63] / 8.0, 1e-18);
  // In between: smooth blend, strictly between the two.
  bool blended = false;
  for (int i = 0; i < 64; ++i)
    if (scaled[i] < plain[i] && scaled[i] > plain[i] / 8.0 + 1e-18) blended = true;
  EXPECT_TRUE(blended);
  auto table = RopeCosSinTable(c, 3);
  EXPECT_FLOAT_EQ(table[0], 1.0f);                 // cos(0)
  EXPECT_FLOAT_EQ(table[64], 0.0f);                // sin(0)
  EXPECT_FLOAT_EQ(table[128 + 0], std::cos(1.0));  // pos 1, freq 1
  EXPECT_FLOAT_EQ(table[128 + 64], std::sin(1.0));
}

}  // namespace
}  // namespace shard
