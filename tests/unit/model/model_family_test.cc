// The model families beside Llama (mistral, qwen2, qwen3): presets against
// the published parameter counts, config.json in and out, HF tensor names in
// and out, and the float model's loss and hand-written gradients (q/k/v biases,
// per-head q/k norms, head_dim != hidden / heads) against the independent
// double-precision reference (tests/unit/model/reference_llama.h) with central
// finite differences. Prints the parity table.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "shard/model/hf_io.h"
#include "shard/model/init.h"
#include "shard/model/llama_model.h"
#include "shard/train/local_params.h"
#include "tests/unit/model/reference_llama.h"

namespace shard {
namespace {

TEST(ModelFamilyTest, PresetsHaveThePublishedParameterCounts) {
  // Totals published on the models' HF pages (safetensors metadata).
  struct Want {
    const char* preset;
    int64_t params;
  };
  for (const Want& w : {Want{"qwen2.5-0.5b", 494032768}, Want{"qwen2.5-7b", 7615616512},
                        Want{"qwen2.5-72b", 72706203648}, Want{"qwen3-0.6b", 596049920},
                        Want{"qwen3-8b", 8190735360}, Want{"qwen3-32b", 32762123264},
                        Want{"mistral-7b", 7241732096}, Want{"mistral-7b-v0.3", 7248023552}}) {
    auto c = LlamaPreset(w.preset);
    ASSERT_TRUE(c.ok()) << w.preset;
    EXPECT_TRUE(c->Validate().ok()) << w.preset;
    EXPECT_EQ(c->NumParams(), w.params) << w.preset;
    EXPECT_EQ(ParamLayout::ForLlama(*c).total_numel, w.params) << w.preset;
    EXPECT_NEAR(c->ApproxParams(), static_cast<double>(w.params), 1.0) << w.preset;
  }
  EXPECT_EQ(LlamaPreset("qwen3-32b")->head_dim(), 128);  // 5120 / 64 = 80
  EXPECT_EQ(LlamaPreset("mistral-7b")->sliding_window, 4096);
}

TEST(ModelFamilyTest, HfConfigRoundTripKeepsTheFamily) {
  for (const char* name : {"mistral-7b", "qwen2.5-0.5b", "qwen3-32b", "tiny-qwen3", "llama3.2-1b"}) {
    LlamaConfig c = *LlamaPreset(name);
    auto back = LlamaConfigFromHfJson(c.ToHfConfigJson(), "config.json");
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString();
    EXPECT_EQ(back->family, c.family) << name;
    EXPECT_EQ(back->head_dim(), c.head_dim()) << name;
    EXPECT_EQ(back->sliding_window, c.sliding_window) << name;
    EXPECT_EQ(back->ShapeHash(), c.ShapeHash()) << name;
    EXPECT_EQ(back->NumParams(), c.NumParams()) << name;
  }
  EXPECT_NE(LlamaPreset("tiny-qwen2")->ShapeHash(), LlamaPreset("tiny")->ShapeHash());
  // A real Qwen2.5 config: use_sliding_window false leaves the window off.
  auto q = LlamaConfigFromHfJson(R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2",
      "vocab_size":151936,"hidden_size":896,"intermediate_size":4864,"num_hidden_layers":24,
      "num_attention_heads":14,"num_key_value_heads":2,"rms_norm_eps":1e-06,"rope_theta":1000000.0,
      "sliding_window":32768,"use_sliding_window":false,"max_window_layers":21,"tie_word_embeddings":true,
      "hidden_act":"silu","max_position_embeddings":32768,"rope_scaling":null})", "qwen.json");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->family, ModelFamily::kQwen2);
  EXPECT_EQ(q->sliding_window, 0);
  EXPECT_EQ(q->NumParams(), 494032768);
}

TEST(ModelFamilyTest, UnknownModelTypeAndWindowAreClearErrors) {
  auto bad = LlamaConfigFromHfJson(R"({"model_type":"gemma2","vocab_size":10})", "m/config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(bad.status().message(),
            "m/config.json: model_type 'gemma2' is not supported (supported: llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, qwen2_moe)");
  auto bias = LlamaConfigFromHfJson(R"({"model_type":"qwen3","attention_bias":true})", "c.json");
  EXPECT_EQ(bias.status().code(), StatusCode::kUnimplemented);

  // Plain causal attention equals the window only up to the window: longer is refused.
  LlamaConfig c = *LlamaPreset("tiny-mistral");
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  ModelOptions mo;
  mo.max_seq = 65;
  auto m = LlamaModel::Create(c, backend->get(), mo);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("exceeds the model's sliding_window 64"), std::string::npos)
      << m.status().ToString();
  mo.max_seq = 64;
  EXPECT_TRUE(LlamaModel::Create(c, backend->get(), mo).ok());
}

TEST(ModelFamilyTest, LayoutHasTheFamilyTensorsUnderHfNames) {
  ParamLayout q2 = ParamLayout::ForLlama(*LlamaPreset("tiny-qwen2"));
  int u, t;
  ASSERT_TRUE(q2.Find("model.layers.1.self_attn.k_proj.bias", &u, &t));
  EXPECT_EQ(t, q2.block_extras.q_bias + 1);
  EXPECT_FALSE(q2.Find("model.layers.1.self_attn.q_norm.weight", &u, &t));
  ParamLayout q3 = ParamLayout::ForLlama(*LlamaPreset("tiny-qwen3"));
  ASSERT_TRUE(q3.Find("model.layers.3.self_attn.q_norm.weight", &u, &t));
  EXPECT_EQ(q3.units[u].tensors[t].shape, std::vector<int64_t>{48});
  ASSERT_TRUE(q3.Find("model.layers.3.self_attn.q_proj.weight", &u, &t));
  EXPECT_EQ(q3.units[u].tensors[t].shape, (std::vector<int64_t>{4 * 48, 128}));
  EXPECT_FALSE(q3.Find("model.layers.0.self_attn.q_proj.bias", &u, &t));
  // New biases start at zero, norms at one.
  std::vector<float> buf(q2.units[1].numel);
  InitUnitParams(q2.units[1], 1, 5, 0.02f, 0, q2.units[1].numel, buf.data());
  const auto& qb = q2.units[1].tensors[q2.block_extras.q_bias];
  for (int64_t i = 0; i < qb.numel; ++i) ASSERT_EQ(buf[qb.offset + i], 0.0f);
}

// HF names out and in: export a family's weights, load them back bit-exactly.
TEST(ModelFamilyTest, ExportThenLoadKeepsEveryTensor) {
  for (const char* name : {"tiny-qwen2", "tiny-qwen3", "tiny-mistral"}) {
    LlamaConfig c = *LlamaPreset(name);
    ParamLayout l = ParamLayout::ForLlama(c);
    std::vector<std::vector<float>> units(l.num_units());
    for (int i = 0; i < l.num_units(); ++i) {
      units[i].resize(l.units[i].numel);
      for (int64_t k = 0; k < l.units[i].numel; ++k) units[i][k] = std::sin(0.37f * k + i);
    }
    std::string dir = ::testing::TempDir() + "/family_export_" + name;
    std::filesystem::remove_all(dir);
    ASSERT_TRUE(ExportHf(dir, c, l, [&](int u, std::vector<float>* b) { *b = units[u]; return OkStatus(); },
                         DType::kF32).ok());
    auto cfg = LlamaConfigFromHfDir(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    EXPECT_EQ(cfg->family, c.family);
    std::vector<std::vector<float>> back;
    ASSERT_TRUE(LoadHfWeights(dir, ParamLayout::ForLlama(*cfg), &back).ok()) << name;
    EXPECT_EQ(back, units) << name;
  }
}

// ---- Parity against the double-precision reference -------------------------

struct FamilyCase {
  const char* name;
  ModelFamily family;
  int head_dim;  // 0 = hidden / heads
  bool tied;
};

LlamaConfig TinyFamily(const FamilyCase& k) {
  LlamaConfig c;
  c.family = k.family;
  c.vocab_size = 23;
  c.hidden_size = 16;
  c.intermediate_size = 20;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.explicit_head_dim = k.head_dim;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = k.tied;
  if (k.family == ModelFamily::kMistral) c.sliding_window = 8;
  return c;
}

struct FamilyRun {
  double loss;
  std::vector<std::vector<float>> grads;
};

FamilyRun RunFloatModel(const LlamaConfig& c, const testing_ref::RefBatch& rb, const std::vector<std::vector<float>>& units,
                  bool checkpointing) {
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
  auto seg = rb.segments;
  DeviceBatch b{rb.B, rb.T, rb.tokens.data(), rb.targets.data(), rb.positions.data(),
                seg.empty() ? nullptr : seg.data()};
  auto loss = (*model)->ForwardBackward(b, **params, 0.5f);
  EXPECT_TRUE(loss.ok()) << loss.status().ToString();
  FamilyRun r{*loss, {}};
  for (int u = 0; u < (*model)->layout().num_units(); ++u)
    r.grads.emplace_back((*params)->grads(u), (*params)->grads(u) + (*model)->layout().units[u].numel);
  return r;
}

class FamilyParityTest : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(FamilyParityTest, LossAndGradientsMatchTheReference) {
  const FamilyCase k = GetParam();
  const LlamaConfig c = TinyFamily(k);
  ASSERT_TRUE(c.Validate().ok()) << c.Validate().ToString();
  const ParamLayout layout = ParamLayout::ForLlama(c);
  std::vector<std::vector<float>> units(layout.num_units());
  testing_ref::Units ref(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    units[u].resize(layout.units[u].numel);
    InitUnitParams(layout.units[u], u, 17, 0.3f, 0, layout.units[u].numel, units[u].data());
    // Vectors (norms, biases) away from their init so their gradients matter.
    for (const auto& t : layout.units[u].tensors)
      if (t.shape.size() == 1)
        for (int64_t i = 0; i < t.numel; ++i) units[u][t.offset + i] = 1.0f + 0.2f * std::sin(2.0f + i + u);
    ref[u].assign(units[u].begin(), units[u].end());
  }
  std::mt19937 rng(3);
  testing_ref::RefBatch rb;
  rb.B = 2;
  rb.T = 7;
  for (int i = 0; i < rb.B * rb.T; ++i) {
    rb.tokens.push_back(static_cast<int>(rng() % c.vocab_size));
    rb.targets.push_back(i % 5 == 4 ? -1 : static_cast<int>(rng() % c.vocab_size));
    rb.positions.push_back(i % rb.T);
  }
  const FamilyRun r = RunFloatModel(c, rb, units, false);
  const double ref_loss = testing_ref::LossSum(c, layout, ref, rb);
  const double loss_err = std::abs(r.loss - ref_loss) / std::abs(ref_loss);
  EXPECT_LT(loss_err, 1e-5) << k.name;

  double max_err = 0;
  int checked = 0;
  for (int u = 0; u < layout.num_units(); ++u)
    for (const auto& t : layout.units[u].tensors)
      for (int s = 0; s < 3; ++s) {
        int64_t i = t.offset + static_cast<int64_t>(rng() % t.numel);
        if (u == 0) i = rb.tokens[rng() % rb.tokens.size()] * c.hidden_size + static_cast<int64_t>(rng() % c.hidden_size);
        const double eps = 1e-5, orig = ref[u][i];
        ref[u][i] = orig + eps;
        const double lp = testing_ref::LossSum(c, layout, ref, rb);
        ref[u][i] = orig - eps;
        const double lm = testing_ref::LossSum(c, layout, ref, rb);
        ref[u][i] = orig;
        const double fd = 0.5 * (lp - lm) / (2 * eps);
        const double err = std::abs(r.grads[u][i] - fd) / std::max(1e-3, std::abs(fd));
        max_err = std::max(max_err, err);
        EXPECT_LT(err, 2e-3) << k.name << " " << t.hf_name << ": analytic " << r.grads[u][i] << " vs " << fd;
        ++checked;
      }
  // Activation checkpointing recomputes the same forward: identical gradients.
  const FamilyRun ck = RunFloatModel(c, rb, units, true);
  EXPECT_EQ(ck.loss, r.loss);
  for (int u = 0; u < layout.num_units(); ++u) EXPECT_EQ(ck.grads[u], r.grads[u]) << k.name << " unit " << u;
  std::printf("| %-16s | %9lld | %12.6f | %12.6f | %8.1e | %4d | %8.1e |\n", k.name,
              static_cast<long long>(layout.total_numel), r.loss, ref_loss, loss_err, checked, max_err);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyParityTest,
                         ::testing::Values(FamilyCase{"llama", ModelFamily::kLlama, 0, false},
                                           FamilyCase{"mistral", ModelFamily::kMistral, 0, false},
                                           FamilyCase{"qwen2_tied", ModelFamily::kQwen2, 0, true},
                                           FamilyCase{"qwen3", ModelFamily::kQwen3, 0, false},
                                           FamilyCase{"qwen3_head_dim_6", ModelFamily::kQwen3, 6, false}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace shard
