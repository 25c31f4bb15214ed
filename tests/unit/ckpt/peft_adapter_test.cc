// Reading a PEFT LoRA folder refuses what shardd would otherwise drop or get
// wrong, naming the key or the tensor: adapter_config.json options that
// change what the adapter computes (alpha_pattern, rank_pattern,
// layers_to_transform, use_dora, ...) unless they hold PEFT's default; a
// target module shardd does not adapt (lm_head); a lora_alpha or use_rslora
// other than the job's; a tensor in the file that the job's adapter does not
// have; and inf/NaN values.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "shard/ckpt/peft_adapter.h"
#include "shard/ckpt/safetensors.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

LlamaConfig Small() {
  LlamaConfig c;
  c.vocab_size = 40;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  return c;
}

PeftConfig Peft() {
  PeftConfig p;
  p.method = PeftMethod::kLora;
  p.r = 2;
  p.alpha = 4;
  p.target_modules = {LoraTarget::kQ, LoraTarget::kV};
  return p;
}

class PeftAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/peft_adapter_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    layout_ = LoraLayout::For(Small(), Peft());
    layers_.assign(layout_.num_layers, std::vector<float>(layout_.layer_numel));
    for (int l = 0; l < layout_.num_layers; ++l)
      for (int64_t i = 0; i < layout_.layer_numel; ++i) layers_[l][i] = 0.01f * static_cast<float>((i + 3 * l) % 17);
    ASSERT_TRUE(WritePeftAdapter(dir_, Peft(), layout_, "base", layers_, DType::kF32).ok());
    std::ifstream in(dir_ + "/adapter_config.json");
    cfg_ = nlohmann::json::parse(in);
  }
  void WriteConfig(const nlohmann::json& c) { std::ofstream(dir_ + "/adapter_config.json") << c.dump(2); }
  // Rewrites the weights with `extra` tensors beside the adapter's, and one
  // element of layer 1's v_proj lora_B set to `v_b0`.
  void WriteWeights(const std::vector<std::string>& extra, float v_b0 = 0.5f) {
    std::vector<TensorDecl> decls;
    std::vector<std::vector<float>> data;
    for (int l = 0; l < layout_.num_layers; ++l)
      for (const LoraTensor& t : layout_.tensors)
        for (bool is_b : {false, true}) {
          decls.push_back({PeftTensorName(l, t.target, is_b), is_b ? std::vector<int64_t>{t.out, layout_.r}
                                                                 : std::vector<int64_t>{layout_.r, t.in}});
          const float* src = layers_[l].data() + (is_b ? t.b_offset : t.a_offset);
          data.emplace_back(src, src + decls.back().shape[0] * decls.back().shape[1]);
          if (l == 1 && is_b && t.target == LoraTarget::kV) data.back()[0] = v_b0;
        }
    for (const std::string& name : extra) {
      decls.push_back({name, {layout_.r, 16}});
      data.emplace_back(layout_.r * 16, 0.25f);
    }
    auto w = SafetensorsWriter::Create(dir_ + "/adapter_model.safetensors", decls, DType::kF32);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (size_t i = 0; i < decls.size(); ++i) ASSERT_TRUE(w->Write(decls[i].name, data[i].data()).ok());
    ASSERT_TRUE(w->Finish().ok());
  }
  Status Read() {
    std::vector<std::vector<float>> back;
    return ReadPeftAdapter(dir_, Peft(), layout_, &back);
  }

  std::string dir_;
  LoraLayout layout_;
  std::vector<std::vector<float>> layers_;
  nlohmann::json cfg_;
};

TEST_F(PeftAdapterTest, WhatWasWrittenReadsBack) {
  std::vector<std::vector<float>> back;
  ASSERT_TRUE(ReadPeftAdapter(dir_, Peft(), layout_, &back).ok());
  EXPECT_EQ(back, layers_);
}

TEST_F(PeftAdapterTest, UnimplementedOptionsAreRefusedByName) {
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"alpha_pattern", {{"q_proj", 16}}},
      {"rank_pattern", {{"model.layers.0.self_attn.q_proj", 8}}},
      {"layers_to_transform", {0}},
      {"layers_to_transform", 1},
      {"layers_pattern", "layers"},
      {"use_dora", true},
      {"lora_bias", true},
      {"exclude_modules", {"v_proj"}},
      {"trainable_token_indices", {1, 2}},
      {"layer_replication", {{0, 1}}},
      {"modules_to_save", {"lm_head"}},
      {"fan_in_fan_out", true},
      {"use_qalora", true},
      {"target_parameters", {"mlp.experts.down_proj"}},
      {"bias", "all"}};
  for (const auto& [key, value] : cases) {
    nlohmann::json c = cfg_;
    c[key] = value;
    WriteConfig(c);
    for (const Status& st : {Read(), ReadPeftAdapterConfig(dir_).status()}) {
      ASSERT_FALSE(st.ok()) << key << " " << value.dump();
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find("adapter_config.json: " + key + " "), std::string::npos) << st.ToString();
    }
  }
  // PEFT's defaults for the same keys change nothing.
  nlohmann::json c = cfg_;
  c["alpha_pattern"] = nlohmann::json::object();
  c["rank_pattern"] = nlohmann::json::object();
  c["layers_to_transform"] = nullptr;
  c["layers_pattern"] = nullptr;
  c["use_dora"] = false;
  c["lora_bias"] = false;
  c["exclude_modules"] = nullptr;
  c["target_parameters"] = nlohmann::json::array();
  c["megatron_config"] = nullptr;
  c["init_lora_weights"] = "pissa";  // how a fresh adapter starts: nothing to apply on load
  WriteConfig(c);
  EXPECT_TRUE(Read().ok()) << Read().ToString();
}

// task_type other than CAUSAL_LM, and a key shardd does not know set to a
// value (not PEFT's default), are refused naming the key; a real PEFT 0.13
// config's other keys (their defaults) read.
TEST_F(PeftAdapterTest, TaskTypeAndUnknownKeysAreRefusedByName) {
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"task_type", "SEQ_CLS"}, {"task_type", "TOKEN_CLS"}, {"lora_magic_scale", 2.0}, {"new_peft_option", true}};
  for (const auto& [key, value] : cases) {
    nlohmann::json c = cfg_;
    c[key] = value;
    WriteConfig(c);
    for (const Status& st : {Read(), ReadPeftAdapterConfig(dir_).status()}) {
      ASSERT_FALSE(st.ok()) << key << " " << value.dump();
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find("adapter_config.json: " + key + " "), std::string::npos) << st.ToString();
    }
  }
  nlohmann::json c = cfg_;
  c.update(nlohmann::json::parse(R"({"auto_mapping": null, "revision": null, "inference_mode": true,
      "init_lora_weights": true, "loftq_config": {}, "megatron_core": "megatron.core", "use_dora": false,
      "layer_replication": null, "runtime_config": {"ephemeral_gpu_offload": false}, "eva_config": null,
      "corda_config": null, "lora_bias": false, "exclude_modules": null, "trainable_token_indices": null,
      "qalora_group_size": 16, "use_qalora": false, "peft_version": "0.17.0", "some_future_flag": false,
      "task_type": "CAUSAL_LM"})"));
  WriteConfig(c);
  EXPECT_TRUE(Read().ok()) << Read().ToString();
  c["task_type"] = nullptr;  // a plain PeftModel: the same layers
  WriteConfig(c);
  EXPECT_TRUE(Read().ok()) << Read().ToString();
}

TEST_F(PeftAdapterTest, AModuleThatIsNotAdaptedIsRefused) {
  nlohmann::json c = cfg_;
  c["target_modules"] = {"q_proj", "v_proj", "lm_head"};
  WriteConfig(c);
  for (const Status& st : {Read(), ReadPeftAdapterConfig(dir_).status()}) {
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("target_modules: 'lm_head' is not a module shardd adapts"), std::string::npos)
        << st.ToString();
  }
}

TEST_F(PeftAdapterTest, ATensorTheAdapterDoesNotHaveIsRefused) {
  for (const std::string extra : {"base_model.model.lm_head.lora_A.weight",
                                  "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight",
                                  "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"}) {
    WriteWeights({extra});
    Status st = Read();
    ASSERT_FALSE(st.ok()) << extra;
    EXPECT_NE(st.message().find("tensor '" + extra + "' is not one this job's adapter has"), std::string::npos)
        << st.ToString();
  }
  WriteWeights({});
  EXPECT_TRUE(Read().ok()) << Read().ToString();
}

TEST_F(PeftAdapterTest, NonFiniteValuesAreRefusedNamingTheTensor) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    WriteWeights({}, bad);
    Status st = Read();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("tensor 'base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight' holds " +
                                std::string(std::isnan(bad) ? "NaN" : "inf") + " at element 0"),
              std::string::npos)
        << st.ToString();
  }
}

TEST_F(PeftAdapterTest, AnotherScaleThanTheJobsIsRefused) {
  nlohmann::json c = cfg_;
  c["lora_alpha"] = 16;
  WriteConfig(c);
  Status st = Read();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("lora_alpha is 16 but the job's peft.alpha is 4"), std::string::npos) << st.ToString();
  c = cfg_;
  c["use_rslora"] = true;
  WriteConfig(c);
  st = Read();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("use_rslora is true but the job's peft.use_rslora is false"), std::string::npos)
      << st.ToString();
}

}  // namespace
}  // namespace shard
