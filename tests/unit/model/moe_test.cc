// Mixture of experts (qwen3_moe, mixtral, qwen2_moe): config.json in and out, the layout
// under HF names, the refusals, and the float model's loss, aux loss and
// hand-written gradients (router, experts, attention) against the independent
// double-precision reference (reference_llama.h: MoeMlpRef) by central finite
// differences, for norm_topk_prob on and off, a dense layer between sparse
// ones, Mixtral naming, and the load-balancing loss over real tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "shard/model/hf_io.h"
#include "shard/model/init.h"
#include "shard/model/kv_decoder.h"
#include "shard/model/llama_model.h"
#include "shard/spec/moe_config.h"
#include "shard/train/local_params.h"
#include "tests/unit/model/reference_llama.h"

namespace shard {
namespace {

constexpr const char* kQwen3MoeJson = R"({"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe",
  "vocab_size":151936,"hidden_size":2048,"intermediate_size":6144,"num_hidden_layers":48,
  "num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"rms_norm_eps":1e-06,"rope_theta":1000000.0,
  "max_position_embeddings":40960,"tie_word_embeddings":false,"hidden_act":"silu","attention_bias":false,
  "num_experts":128,"num_experts_per_tok":8,"moe_intermediate_size":768,"decoder_sparse_step":1,
  "mlp_only_layers":[],"norm_topk_prob":true,"output_router_logits":false,"router_aux_loss_coef":0.001,
  "use_sliding_window":false,"sliding_window":null,"rope_scaling":null})";

TEST(MoeConfigTest, ReadsQwen3MoeAndMixtralWithThePublishedCounts) {
  auto q = LlamaConfigFromHfJson(kQwen3MoeJson, "q/config.json");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->family, ModelFamily::kQwen3Moe);
  EXPECT_EQ(q->moe.num_experts, 128);
  EXPECT_EQ(q->moe.experts_per_tok, 8);
  EXPECT_EQ(q->moe.expert_intermediate_size, 768);
  EXPECT_TRUE(q->moe.norm_topk_prob);
  EXPECT_TRUE(q->qk_norm());
  EXPECT_EQ(q->num_sparse_layers(), 48);
  // Qwen3-30B-A3B: 30,532,122,624 parameters (HF safetensors metadata).
  EXPECT_EQ(q->NumParams(), int64_t{30532122624});
  EXPECT_EQ(ParamLayout::ForLlama(*q).total_numel, q->NumParams());
  EXPECT_NEAR(q->ApproxParams(), static_cast<double>(q->NumParams()), 1.0);
  EXPECT_EQ(LlamaPreset("qwen3-30b-a3b")->ShapeHash(), q->ShapeHash());
  // Mixtral-8x7B: 46,702,792,704.
  auto m = LlamaConfigFromHfJson(R"({"architectures":["MixtralForCausalLM"],"model_type":"mixtral",
      "vocab_size":32000,"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
      "num_attention_heads":32,"num_key_value_heads":8,"rms_norm_eps":1e-05,"rope_theta":1000000.0,
      "max_position_embeddings":32768,"num_local_experts":8,"num_experts_per_tok":2,"output_router_logits":false,
      "router_aux_loss_coef":0.02,"router_jitter_noise":0.0,"sliding_window":null,"tie_word_embeddings":false})",
                                 "m/config.json");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->family, ModelFamily::kMixtral);
  EXPECT_EQ(m->moe.num_experts, 8);
  EXPECT_EQ(m->moe.expert_intermediate_size, 14336);
  EXPECT_DOUBLE_EQ(m->moe.router_aux_loss_coef, 0.02);
  EXPECT_EQ(m->NumParams(), int64_t{46702792704});
  EXPECT_EQ(LlamaPreset("mixtral-8x7b")->NumParams(), m->NumParams());
  // config.json out and in keeps the MoE shape.
  for (const char* name : {"tiny-qwen3-moe", "tiny-mixtral", "qwen3-30b-a3b"}) {
    LlamaConfig c = *LlamaPreset(name);
    auto back = LlamaConfigFromHfJson(c.ToHfConfigJson(), "config.json");
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString();
    EXPECT_EQ(back->family, c.family) << name;
    EXPECT_EQ(back->ShapeHash(), c.ShapeHash()) << name;
    EXPECT_EQ(back->NumParams(), c.NumParams()) << name;
    EXPECT_EQ(back->moe.norm_topk_prob, c.moe.norm_topk_prob) << name;
  }
  EXPECT_NE(LlamaPreset("tiny-qwen3-moe")->ShapeHash(), LlamaPreset("tiny-qwen3")->ShapeHash());
}

TEST(MoeConfigTest, SparseLayersFollowStepAndMlpOnlyLayers) {
  auto c = LlamaConfigFromHfJson(R"({"model_type":"qwen3_moe","vocab_size":32,"hidden_size":16,
      "intermediate_size":20,"num_hidden_layers":6,"num_attention_heads":2,"num_experts":4,
      "num_experts_per_tok":2,"moe_intermediate_size":8,"decoder_sparse_step":2,"mlp_only_layers":[3]})", "c.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::string sparse;
  for (int l = 0; l < 6; ++l) sparse += c->sparse_layer(l) ? "S" : "D";
  EXPECT_EQ(sparse, "DSDDDS");  // (i+1) % 2 == 0 except 3
  EXPECT_FALSE(c->moe.norm_topk_prob);  // Qwen3MoeConfig's default
  const ParamLayout l = ParamLayout::ForLlama(*c);
  int u, t;
  ASSERT_TRUE(l.Find("model.layers.1.mlp.gate.weight", &u, &t));
  EXPECT_EQ(t, kRouter);
  EXPECT_EQ(l.units[u].tensors[t].shape, (std::vector<int64_t>{4, 16}));
  ASSERT_TRUE(l.Find("model.layers.5.mlp.experts.3.up_proj.weight", &u, &t));
  EXPECT_EQ(t, ExpertTensor(3, kExpertUp));
  EXPECT_EQ(l.units[u].tensors[t].shape, (std::vector<int64_t>{8, 16}));
  ASSERT_TRUE(l.Find("model.layers.3.mlp.gate_proj.weight", &u, &t));
  EXPECT_EQ(t, kGate);
  EXPECT_FALSE(l.Find("model.layers.3.mlp.gate.weight", &u, &t));
  ASSERT_TRUE(l.Find("model.layers.5.self_attn.k_norm.weight", &u, &t));
  EXPECT_EQ(t, ParamLayout::ExtrasOf(l.units[u]).k_norm);
  // Mixtral names.
  const ParamLayout m = ParamLayout::ForLlama(*LlamaPreset("tiny-mixtral"));
  ASSERT_TRUE(m.Find("model.layers.0.block_sparse_moe.gate.weight", &u, &t));
  ASSERT_TRUE(m.Find("model.layers.3.block_sparse_moe.experts.2.w2.weight", &u, &t));
  EXPECT_EQ(t, ExpertTensor(2, kExpertDown));
  EXPECT_EQ(m.units[u].tensors[t].shape, (std::vector<int64_t>{128, 96}));
  EXPECT_FALSE(m.Find("model.layers.0.mlp.gate_proj.weight", &u, &t));
}

// qwen2_moe (Qwen1.5-MoE-A2.7B's config.json): qwen2's q/k/v biases, the
// experts, and the shared expert with its sigmoid gate after them.
TEST(MoeConfigTest, ReadsQwen2MoeWithItsSharedExpert) {
  auto q = LlamaConfigFromHfJson(R"({"architectures":["Qwen2MoeForCausalLM"],"model_type":"qwen2_moe",
      "vocab_size":151936,"hidden_size":2048,"intermediate_size":5632,"num_hidden_layers":24,
      "num_attention_heads":16,"num_key_value_heads":16,"max_position_embeddings":8192,"max_window_layers":21,
      "moe_intermediate_size":1408,"num_experts":60,"num_experts_per_tok":4,"shared_expert_intermediate_size":5632,
      "rms_norm_eps":1e-06,"rope_theta":1000000.0,"sliding_window":32768,"use_sliding_window":false,
      "tie_word_embeddings":false,"decoder_sparse_step":1,"output_router_logits":false,
      "router_aux_loss_coef":0.001,"hidden_act":"silu"})", "q2/config.json");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->family, ModelFamily::kQwen2Moe);
  EXPECT_EQ(std::string(q->family_name()), "qwen2_moe");
  EXPECT_TRUE(q->qkv_bias());
  EXPECT_FALSE(q->qk_norm());
  EXPECT_EQ(q->moe.num_experts, 60);
  EXPECT_EQ(q->moe.experts_per_tok, 4);
  EXPECT_EQ(q->moe.expert_intermediate_size, 1408);
  EXPECT_EQ(q->moe.shared_expert_intermediate_size, 5632);
  EXPECT_FALSE(q->moe.norm_topk_prob);  // Qwen2MoeConfig's default
  EXPECT_EQ(q->num_sparse_layers(), 24);
  EXPECT_EQ(q->sliding_window, 0);
  // Qwen1.5-MoE-A2.7B: 14.3B parameters (the tensors counted by hand:
  // embed + head 2 * 151936 * 2048, per layer attention 4 * 2048^2 + biases
  // 3 * 2048 + norms, router 60 * 2048, experts 60 * 3 * 2048 * 1408, shared
  // expert 3 * 2048 * 5632 and its gate 2048; final norm).
  const int64_t per_layer = 4LL * 2048 * 2048 + 3 * 2048 + 2 * 2048 + 60 * 2048 + 60LL * 3 * 2048 * 1408 +
                            3LL * 2048 * 5632 + 2048;
  EXPECT_EQ(q->NumParams(), 2LL * 151936 * 2048 + 24 * per_layer + 2048);
  EXPECT_EQ(q->NumParams(), int64_t{14315784192});
  EXPECT_EQ(ParamLayout::ForLlama(*q).total_numel, q->NumParams());
  EXPECT_NEAR(q->ApproxParams(), static_cast<double>(q->NumParams()), 1.0);
  EXPECT_EQ(LlamaPreset("qwen1.5-moe-a2.7b")->ShapeHash(), q->ShapeHash());
  EXPECT_EQ(LlamaPreset("qwen1.5-moe-a2.7b")->NumParams(), q->NumParams());
  // The layout: the shared expert and its gate after the experts, then the biases.
  const ParamLayout l = ParamLayout::ForLlama(*q);
  int u, t;
  ASSERT_TRUE(l.Find("model.layers.3.mlp.shared_expert.gate_proj.weight", &u, &t));
  EXPECT_EQ(t, SharedExpertTensor(60, kSharedGate));
  EXPECT_EQ(l.units[u].tensors[t].shape, (std::vector<int64_t>{5632, 2048}));
  ASSERT_TRUE(l.Find("model.layers.3.mlp.shared_expert.up_proj.weight", &u, &t));
  EXPECT_EQ(t, SharedExpertTensor(60, kSharedUp));
  ASSERT_TRUE(l.Find("model.layers.3.mlp.shared_expert.down_proj.weight", &u, &t));
  EXPECT_EQ(l.units[u].tensors[t].shape, (std::vector<int64_t>{2048, 5632}));
  ASSERT_TRUE(l.Find("model.layers.3.mlp.shared_expert_gate.weight", &u, &t));
  EXPECT_EQ(t, SharedExpertTensor(60, kSharedExpertGate));
  EXPECT_EQ(l.units[u].tensors[t].shape, (std::vector<int64_t>{1, 2048}));
  ASSERT_TRUE(l.Find("model.layers.3.self_attn.q_proj.bias", &u, &t));
  EXPECT_EQ(t, ParamLayout::ExtrasOf(l.units[u]).q_bias);
  EXPECT_EQ(t, SharedExpertTensor(60, kSharedExpertGate) + 1);
  // config.json out and in keeps the shared expert; the tiny preset too.
  for (const char* name : {"tiny-qwen2-moe", "qwen1.5-moe-a2.7b"}) {
    const LlamaConfig c = *LlamaPreset(name);
    const std::string json = c.ToHfConfigJson();
    EXPECT_NE(json.find("\"shared_expert_intermediate_size\""), std::string::npos) << name;
    EXPECT_NE(json.find("Qwen2MoeForCausalLM"), std::string::npos) << name;
    auto back = LlamaConfigFromHfJson(json, "config.json");
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString();
    EXPECT_EQ(back->family, ModelFamily::kQwen2Moe) << name;
    EXPECT_EQ(back->moe.shared_expert_intermediate_size, c.moe.shared_expert_intermediate_size) << name;
    EXPECT_EQ(back->moe.norm_topk_prob, c.moe.norm_topk_prob) << name;
    EXPECT_EQ(back->ShapeHash(), c.ShapeHash()) << name;
    EXPECT_EQ(back->NumParams(), c.NumParams()) << name;
  }
  // The shared expert's width is part of the shape.
  LlamaConfig wider = *LlamaPreset("tiny-qwen2-moe");
  wider.moe.shared_expert_intermediate_size += 8;
  EXPECT_NE(wider.ShapeHash(), LlamaPreset("tiny-qwen2-moe")->ShapeHash());
  // qwen2_moe's sparse-layer rule is qwen3_moe's.
  auto c = LlamaConfigFromHfJson(R"({"model_type":"qwen2_moe","vocab_size":32,"hidden_size":16,
      "intermediate_size":20,"num_hidden_layers":6,"num_attention_heads":2,"num_experts":4,
      "num_experts_per_tok":2,"moe_intermediate_size":8,"shared_expert_intermediate_size":12,
      "decoder_sparse_step":2,"mlp_only_layers":[3]})", "c.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::string sparse;
  for (int i = 0; i < 6; ++i) sparse += c->sparse_layer(i) ? "S" : "D";
  EXPECT_EQ(sparse, "DSDDDS");
  auto neg = LlamaConfigFromHfJson(R"({"model_type":"qwen2_moe","vocab_size":32,"hidden_size":16,
      "intermediate_size":20,"num_hidden_layers":2,"num_attention_heads":2,"shared_expert_intermediate_size":0})",
                                   "n.json");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("shared_expert_intermediate_size"), std::string::npos)
      << neg.status().ToString();
}

TEST(MoeConfigTest, UnsupportedMoeConfigsAreOneLineErrors) {
  auto gpt = LlamaConfigFromHfJson(R"({"model_type":"gpt_oss","vocab_size":10})", "g/config.json");
  ASSERT_EQ(gpt.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(gpt.status().message().find("'gpt_oss' is not supported yet (missing: its router bias"), std::string::npos)
      << gpt.status().ToString();
  auto k = LlamaConfigFromHfJson(R"({"model_type":"mixtral","vocab_size":32,"hidden_size":16,"intermediate_size":20,
      "num_hidden_layers":2,"num_attention_heads":2,"num_local_experts":2,"num_experts_per_tok":3})", "k.json");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("num_experts_per_tok 3 must be in 1..2"), std::string::npos)
      << k.status().ToString();
  auto only = LlamaConfigFromHfJson(R"({"model_type":"qwen3_moe","vocab_size":32,"hidden_size":16,
      "intermediate_size":20,"num_hidden_layers":2,"num_attention_heads":2,"mlp_only_layers":[7]})", "o.json");
  ASSERT_FALSE(only.ok());
  EXPECT_NE(only.status().message().find("mlp_only_layers entry 7 is not a layer"), std::string::npos);
  // Not built yet, refused rather than computed wrongly.
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  ModelOptions mo;
  mo.max_seq = 8;
  mo.activation_dtype = DType::kBF16;  // built (moe_train_test: Bf16MatchesCheckpointingAndLearns)
  auto bf = LlamaModel::Create(*LlamaPreset("tiny-mixtral"), backend->get(), mo);
  EXPECT_TRUE(bf.ok()) << bf.status().ToString();
  // Cached decoding is built (kv_decoder_test: KvDecoderMoeTest).
  EXPECT_TRUE(KvDecoder::Create(*LlamaPreset("tiny-qwen3-moe"), backend->get(), 16, 4).ok());
}

// HF names out and in: export a tiny MoE folder, load it back bit-exactly.
TEST(MoeConfigTest, HfFolderRoundTripKeepsEveryExpert) {
  for (const char* name : {"tiny-qwen3-moe", "tiny-mixtral", "tiny-qwen2-moe"}) {
    auto preset = LlamaPreset(name);
    ASSERT_TRUE(preset.ok()) << preset.status().ToString();
    LlamaConfig c = *preset;
    ParamLayout l = ParamLayout::ForLlama(c);
    std::vector<std::vector<float>> units(l.num_units());
    for (int i = 0; i < l.num_units(); ++i) {
      units[i].resize(l.units[i].numel);
      for (int64_t k = 0; k < l.units[i].numel; ++k) units[i][k] = std::sin(0.37f * k + i);
    }
    std::string dir = ::testing::TempDir() + "/moe_export_" + name;
    std::filesystem::remove_all(dir);
    ASSERT_TRUE(ExportHf(dir, c, l, [&](int u, std::vector<float>* b) { *b = units[u]; return OkStatus(); },
                         DType::kF32).ok());
    auto cfg = LlamaConfigFromHfDir(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    EXPECT_EQ(cfg->family, c.family);
    EXPECT_EQ(cfg->NumParams(), c.NumParams());
    EXPECT_EQ(ParamLayout::ForLlama(*cfg).total_numel, c.NumParams());
    std::vector<std::vector<float>> back;
    ASSERT_TRUE(LoadHfWeights(dir, ParamLayout::ForLlama(*cfg), &back).ok()) << name;
    EXPECT_EQ(back, units) << name;
    // Exporting what was loaded writes the same bytes (config.json and weights).
    const std::string again = dir + "_again";
    std::filesystem::remove_all(again);
    ASSERT_TRUE(ExportHf(again, *cfg, ParamLayout::ForLlama(*cfg),
                         [&](int u, std::vector<float>* b) { *b = back[u]; return OkStatus(); }, DType::kF32).ok());
    auto bytes = [](const std::filesystem::path& p) {
      std::ifstream in(p, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      ++files;
      EXPECT_EQ(bytes(e.path()), bytes(std::filesystem::path(again) / e.path().filename())) << name << " " << e.path();
    }
    EXPECT_GE(files, 2) << name;
  }
}

TEST(MoeConfigTest, AuxCoefficientDefaultIsTransformers) {
  LlamaConfig c = *LlamaPreset("tiny-mixtral");
  MoeConfig moe;
  EXPECT_EQ(moe.AuxLossCoef(c), 0.0);  // output_router_logits false: no aux loss
  c.moe.output_router_logits = true;
  c.moe.router_aux_loss_coef = 0.02;
  EXPECT_EQ(moe.AuxLossCoef(c), 0.02);
  moe.aux_loss_coef = 0.5;
  EXPECT_EQ(moe.AuxLossCoef(c), 0.5);
  EXPECT_EQ(moe.AuxLossCoef(*LlamaPreset("tiny")), 0.0);  // dense
}

// Backend::MoeRoute on the CPU: ties go to the lower expert, the grouping is
// stable (row order within an expert), the weights renormalise iff asked.
// The sim backend has the ops (shapes only); Backend's defaults refuse, naming the op.
TEST(MoeBackendTest, RouteGroupsByExpertAndOtherBackendsRefuse) {
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  // 3 rows over 4 experts, k = 2: row 0 ties experts 1 and 3 (both highest).
  std::vector<float> logits = {0, 2, 1, 2, /**/ 3, 0, 0, 1, /**/ 0, 0, 5, 4};
  std::vector<float> probs(12), weight(6);
  std::vector<int32_t> expert(6), perm(6), offsets(5);
  MoeRouting r;
  r.rows = 3, r.experts = 4, r.k = 2, r.renormalize = true;
  r.probs = probs.data(), r.expert = expert.data(), r.weight = weight.data(), r.perm = perm.data();
  r.offsets = offsets.data();
  ASSERT_TRUE((*backend)->MoeRoute(logits.data(), r).ok());
  EXPECT_EQ(expert, (std::vector<int32_t>{1, 3, 0, 3, 2, 3}));
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 1, 2, 3, 6}));
  EXPECT_EQ(perm, (std::vector<int32_t>{2, 0, 4, 1, 3, 5}));  // expert 3: rows 0, 1, 2 in order
  EXPECT_FLOAT_EQ(weight[0], 0.5f);
  EXPECT_NEAR(weight[2] + weight[3], 1.0, 1e-6);
  r.renormalize = false;
  ASSERT_TRUE((*backend)->MoeRoute(logits.data(), r).ok());
  EXPECT_FLOAT_EQ(weight[2], probs[4 + 0]);
  auto sim = CreateBackend("sim");
  ASSERT_TRUE(sim.ok());
  ModelOptions mo;
  mo.max_seq = 4;
  // The memory simulator has the ops (shapes only): the model builds there.
  auto m = LlamaModel::Create(*LlamaPreset("tiny-qwen3-moe"), sim->get(), mo);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  // A backend without them (Backend's defaults) refuses, naming the op.
  const Status no = (*sim)->Backend::MoeRoute(logits.data(), r);
  ASSERT_EQ(no.code(), StatusCode::kUnimplemented);
  EXPECT_NE(no.message().find("MoeRoute (mixture-of-experts) is not implemented on this backend yet"), std::string::npos)
      << no.ToString();
}

// A Mixtral folder as transformers writes it, built here by hand (config.json
// and one safetensors file under the HF names, not through shardd's writer):
// it loads with every tensor where the layout says, and the parameter count
// is the sum of the file's tensors.
TEST(MoeConfigTest, LoadsAHandWrittenMixtralFolder) {
  const std::string dir = ::testing::TempDir() + "/moe_hand_mixtral";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"architectures":["MixtralForCausalLM"],"model_type":"mixtral",
    "vocab_size":11,"hidden_size":8,"intermediate_size":6,"num_hidden_layers":2,"num_attention_heads":2,
    "num_key_value_heads":1,"num_local_experts":3,"num_experts_per_tok":2,"rms_norm_eps":1e-05,
    "rope_theta":1000000.0,"router_jitter_noise":0.0,"output_router_logits":false,"router_aux_loss_coef":0.02,
    "sliding_window":null,"tie_word_embeddings":false,"torch_dtype":"float32"})";
  std::map<std::string, std::vector<int64_t>> shapes = {{"model.embed_tokens.weight", {11, 8}},
                                                        {"model.norm.weight", {8}},
                                                        {"lm_head.weight", {11, 8}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    shapes[p + "input_layernorm.weight"] = {8};
    shapes[p + "post_attention_layernorm.weight"] = {8};
    shapes[p + "self_attn.q_proj.weight"] = {8, 8};
    shapes[p + "self_attn.k_proj.weight"] = {4, 8};
    shapes[p + "self_attn.v_proj.weight"] = {4, 8};
    shapes[p + "self_attn.o_proj.weight"] = {8, 8};
    shapes[p + "block_sparse_moe.gate.weight"] = {3, 8};
    for (int j = 0; j < 3; ++j) {
      const std::string e = p + "block_sparse_moe.experts." + std::to_string(j) + ".";
      shapes[e + "w1.weight"] = {6, 8};
      shapes[e + "w3.weight"] = {6, 8};
      shapes[e + "w2.weight"] = {8, 6};
    }
  }
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  int64_t total = 0, k = 0;
  std::map<std::string, float> first;  // each tensor's first value
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + n * 4}}};
    first[name] = static_cast<float>(k);
    for (int64_t i = 0; i < n; ++i, ++k) {
      const float v = static_cast<float>(k);
      data.append(reinterpret_cast<const char*>(&v), 4);
    }
    total += n;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  const uint64_t hn = h.size();
  std::ofstream f(dir + "/model.safetensors", std::ios::binary);
  f.write(reinterpret_cast<const char*>(&hn), 8);
  f << h << data;
  f.close();

  auto cfg = LlamaConfigFromHfDir(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->NumParams(), total);
  const ParamLayout layout = ParamLayout::ForLlama(*cfg);
  EXPECT_EQ(layout.total_numel, total);
  std::vector<std::vector<float>> units;
  ASSERT_TRUE(LoadHfWeights(dir, layout, &units).ok());
  for (const auto& [name, v] : first) {
    int u = -1, t = -1;
    ASSERT_TRUE(layout.Find(name, &u, &t)) << name;
    EXPECT_EQ(units[u][layout.units[u].tensors[t].offset], v) << name;
  }
}

// ---- Parity against the double-precision reference -------------------------

struct MoeCase {
  const char* name;
  ModelFamily family;
  bool norm_topk;
  std::vector<int> mlp_only;  // qwen3_moe: dense layers
  float aux_scale;            // 0: no aux gradient
  bool padding;               // the last rows are padding (excluded from the aux loss)
  float z_scale = 0;          // the router z-loss's gradient scale (0: off)
  int64_t shared_ffn = 0;     // qwen2_moe: the shared expert's width
};

void PrintTo(const MoeCase& k, std::ostream* os) { *os << k.name; }

LlamaConfig TinyMoe(const MoeCase& k) {
  LlamaConfig c;
  c.family = k.family;
  c.vocab_size = 23;
  c.hidden_size = 16;
  c.intermediate_size = 20;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 64;
  c.moe.num_experts = 4;
  c.moe.experts_per_tok = 2;
  c.moe.expert_intermediate_size = 12;
  c.moe.norm_topk_prob = k.norm_topk;
  c.moe.mlp_only_layers = k.mlp_only;
  if (k.family == ModelFamily::kMixtral) c.moe.expert_intermediate_size = c.intermediate_size;
  c.moe.shared_expert_intermediate_size = k.shared_ffn;
  return c;
}

struct MoeRun {
  double loss = 0, aux = 0, z = 0;
  std::vector<std::vector<float>> grads;
};

MoeRun RunMoeModel(const LlamaConfig& c, const testing_ref::RefBatch& rb, const std::vector<uint8_t>& real,
                   const std::vector<std::vector<float>>& units, bool checkpointing, float aux_scale,
                   float z_scale = 0) {
  auto backend = CreateBackend("cpu");
  EXPECT_TRUE(backend.ok());
  ModelOptions mo;
  mo.max_batch = rb.B;
  mo.max_seq = rb.T;
  mo.activation_checkpointing = checkpointing;
  auto model = LlamaModel::Create(c, backend->get(), mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto params = LocalParams::Create(backend->get(), (*model)->layout(), true);
  EXPECT_TRUE(params.ok());
  EXPECT_TRUE((*params)->LoadUnits(units).ok());
  DeviceBatch b{rb.B, rb.T, rb.tokens.data(), rb.targets.data(), rb.positions.data(), nullptr};
  b.real_rows = real.empty() ? nullptr : real.data();
  (*model)->SetMoeAuxGradScale(aux_scale);
  (*model)->SetMoeZLossGradScale(z_scale);
  auto loss = (*model)->ForwardBackward(b, **params, 0.5f);
  EXPECT_TRUE(loss.ok()) << loss.status().ToString();
  MoeRun r;
  r.loss = loss.ok() ? *loss : 0;
  r.aux = (*model)->moe_aux_loss();
  r.z = (*model)->moe_z_loss();
  for (int u = 0; u < (*model)->layout().num_units(); ++u)
    r.grads.emplace_back((*params)->grads(u), (*params)->grads(u) + (*model)->layout().units[u].numel);
  return r;
}

class MoeParityTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeParityTest, LossAuxAndGradientsMatchTheReference) {
  const MoeCase k = GetParam();
  const LlamaConfig c = TinyMoe(k);
  ASSERT_TRUE(c.Validate().ok()) << c.Validate().ToString();
  const ParamLayout layout = ParamLayout::ForLlama(c);
  std::vector<std::vector<float>> units(layout.num_units());
  testing_ref::Units ref(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    units[u].resize(layout.units[u].numel);
    InitUnitParams(layout.units[u], u, 17, 0.3f, 0, layout.units[u].numel, units[u].data());
    for (const auto& t : layout.units[u].tensors)
      if (t.shape.size() == 1)
        for (int64_t i = 0; i < t.numel; ++i) units[u][t.offset + i] = 1.0f + 0.2f * std::sin(2.0f + i + u);
    ref[u].assign(units[u].begin(), units[u].end());
  }
  std::mt19937 rng(5);
  testing_ref::RefBatch rb;
  rb.B = 2;
  rb.T = 7;
  std::vector<uint8_t> real;
  for (int i = 0; i < rb.B * rb.T; ++i) {
    const bool pad = k.padding && i % rb.T >= 5;
    rb.tokens.push_back(static_cast<int>(rng() % c.vocab_size));
    rb.targets.push_back(pad || i % 5 == 4 ? -1 : static_cast<int>(rng() % c.vocab_size));
    rb.positions.push_back(i % rb.T);
    if (k.padding) real.push_back(pad ? 0 : 1);
  }
  double ref_z = 0;
  auto total = [&](double* aux_out) {
    testing_ref::RefMoeAux aux;
    aux.real = real;
    const double ce = testing_ref::LossSum(c, layout, ref, rb, {}, &aux);
    const double a = aux.Loss(c.moe.num_experts);
    if (aux_out) *aux_out = a, ref_z = aux.ZLoss();
    return 0.5 * ce + k.aux_scale * a + k.z_scale * aux.ZLoss();
  };
  const MoeRun r = RunMoeModel(c, rb, real, units, false, k.aux_scale, k.z_scale);
  double ref_aux = 0;
  total(&ref_aux);
  if (k.z_scale != 0) {
    EXPECT_GT(ref_z, 0);
    EXPECT_NEAR(r.z, ref_z, 1e-5 * ref_z) << k.name;
  }
  const double ref_loss = testing_ref::LossSum(c, layout, ref, rb);
  const double loss_err = std::abs(r.loss - ref_loss) / std::abs(ref_loss);
  EXPECT_LT(loss_err, 1e-5) << k.name;
  EXPECT_NEAR(r.aux, ref_aux, 1e-5 * ref_aux) << k.name;

  double max_err = 0;
  int checked = 0;
  for (int u = 0; u < layout.num_units(); ++u)
    for (const auto& t : layout.units[u].tensors)
      for (int s = 0; s < 2; ++s) {
        int64_t i = t.offset + static_cast<int64_t>(rng() % t.numel);
        if (u == 0) i = rb.tokens[rng() % rb.tokens.size()] * c.hidden_size + static_cast<int64_t>(rng() % c.hidden_size);
        const double eps = 1e-5, orig = ref[u][i];
        ref[u][i] = orig + eps;
        const double lp = total(nullptr);
        ref[u][i] = orig - eps;
        const double lm = total(nullptr);
        ref[u][i] = orig;
        const double fd = (lp - lm) / (2 * eps);
        const double err = std::abs(r.grads[u][i] - fd) / std::max(1e-3, std::abs(fd));
        max_err = std::max(max_err, err);
        EXPECT_LT(err, 2e-3) << k.name << " " << t.hf_name << ": analytic " << r.grads[u][i] << " vs " << fd;
        ++checked;
      }
  // Activation checkpointing recomputes the same forward (and counts the aux loss once).
  const MoeRun ck = RunMoeModel(c, rb, real, units, true, k.aux_scale, k.z_scale);
  EXPECT_EQ(ck.loss, r.loss);
  EXPECT_EQ(ck.aux, r.aux);
  for (int u = 0; u < layout.num_units(); ++u) EXPECT_EQ(ck.grads[u], r.grads[u]) << k.name << " unit " << u;
  std::printf("| %-22s | %7lld | %11.6f | %11.6f | %8.1e | aux %9.6f vs %9.6f | %4d | %8.1e |\n", k.name,
              static_cast<long long>(layout.total_numel), r.loss, ref_loss, loss_err, r.aux, ref_aux, checked,
              max_err);
}

INSTANTIATE_TEST_SUITE_P(
    Moe, MoeParityTest,
    ::testing::Values(MoeCase{"qwen3_moe_norm_topk", ModelFamily::kQwen3Moe, true, {}, 0.0f, false},
                      MoeCase{"qwen3_moe_no_norm_dense_mid", ModelFamily::kQwen3Moe, false, {1}, 0.0f, false},
                      MoeCase{"qwen3_moe_aux_padding", ModelFamily::kQwen3Moe, true, {1}, 0.7f, true},
                      MoeCase{"mixtral_aux", ModelFamily::kMixtral, true, {}, 0.7f, false},
                      MoeCase{"qwen3_moe_z_aux_padding", ModelFamily::kQwen3Moe, true, {1}, 0.7f, true, 0.4f},
                      MoeCase{"mixtral_z_only", ModelFamily::kMixtral, true, {}, 0.0f, false, 0.4f},
                      MoeCase{"qwen2_moe_no_norm_aux_pad", ModelFamily::kQwen2Moe, false, {1}, 0.7f, true, 0.0f, 10},
                      MoeCase{"qwen2_moe_norm_topk", ModelFamily::kQwen2Moe, true, {}, 0.0f, false, 0.0f, 10}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace shard
