// Whole-model checks: the float model's loss and hand-written gradients against
// an independent double-precision reference with central finite differences,
// for GQA and non-GQA, tied and untied heads, packed segments, and with
// activation checkpointing (which must give bit-identical gradients).
#include <gtest/gtest.h>

#include <random>

#include "shard/model/init.h"
#include "shard/model/llama_model.h"
#include "shard/train/local_params.h"
#include "tests/unit/model/reference_llama.h"

namespace shard {
namespace {

struct Case {
  const char* name;
  int heads, kv_heads;
  bool tied;
  bool segments;
};

LlamaConfig SmallConfig(const Case& k) {
  LlamaConfig c;
  c.vocab_size = 23;
  c.hidden_size = 16;
  c.intermediate_size = 20;
  c.num_layers = 2;
  c.num_heads = k.heads;
  c.num_kv_heads = k.kv_heads;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = k.tied;
  return c;
}

testing_ref::RefBatch MakeBatch(int B, int T, int V, bool segments, uint32_t seed) {
  std::mt19937 rng(seed);
  testing_ref::RefBatch b;
  b.B = B;
  b.T = T;
  for (int bb = 0; bb < B; ++bb) {
    int seg = 0, pos = 0;
    for (int t = 0; t < T; ++t) {
      if (segments && t > 0 && t % 3 == 0 && bb == 0) {  // row 0 packs three samples
        ++seg;
        pos = 0;
      }
      b.tokens.push_back(static_cast<int>(rng() % V));
      b.targets.push_back((t + bb) % 4 == 3 ? -1 : static_cast<int>(rng() % V));  // some non-targets
      b.positions.push_back(segments ? pos : t);
      if (segments) b.segments.push_back(seg);
      ++pos;
    }
  }
  return b;
}

struct Result {
  double loss;
  std::vector<std::vector<float>> grads;
};

Result RunModel(const LlamaConfig& c, const testing_ref::RefBatch& rb, const std::vector<std::vector<float>>& units,
                bool checkpointing, float grad_scale) {
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
  auto loss = (*model)->ForwardBackward(b, **params, grad_scale);
  EXPECT_TRUE(loss.ok()) << loss.status().ToString();
  Result r;
  r.loss = *loss;
  for (int u = 0; u < (*model)->layout().num_units(); ++u) {
    const auto& spec = (*model)->layout().units[u];
    r.grads.emplace_back((*params)->grads(u), (*params)->grads(u) + spec.numel);
  }
  return r;
}

class ModelGradTest : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGradTest, MatchesDoubleReferenceFiniteDifferences) {
  const Case k = GetParam();
  LlamaConfig c = SmallConfig(k);
  ParamLayout layout = ParamLayout::ForLlama(c);
  std::vector<std::vector<float>> units(layout.num_units());
  testing_ref::Units ref(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    units[u].resize(layout.units[u].numel);
    InitUnitParams(layout.units[u], u, 99, 0.3f, 0, layout.units[u].numel, units[u].data());
    // Perturb norm weights away from 1 so their gradients are exercised.
    for (const auto& t : layout.units[u].tensors)
      if (t.shape.size() == 1)
        for (int64_t i = 0; i < t.numel; ++i) units[u][t.offset + i] = 1.0f + 0.1f * std::sin(1.0f + i + u);
    ref[u].assign(units[u].begin(), units[u].end());
  }
  auto rb = MakeBatch(2, 7, static_cast<int>(c.vocab_size), k.segments, 5);
  const float scale = 0.25f;

  Result r = RunModel(c, rb, units, /*checkpointing=*/false, scale);
  double ref_loss = testing_ref::LossSum(c, layout, ref, rb);
  EXPECT_NEAR(r.loss, ref_loss, 1e-4 * std::abs(ref_loss));

  // Finite differences on a spread of parameters in every tensor of every unit.
  std::mt19937 rng(11);
  int checked = 0;
  double max_err = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto& t : layout.units[u].tensors) {
      for (int s = 0; s < 4; ++s) {
        int64_t i = t.offset + static_cast<int64_t>(rng() % t.numel);
        if (u == 0) {  // embedding rows that appear in the batch get gradients
          int tok = rb.tokens[rng() % rb.tokens.size()];
          i = tok * c.hidden_size + static_cast<int64_t>(rng() % c.hidden_size);
        }
        const double eps = 1e-5, orig = ref[u][i];
        ref[u][i] = orig + eps;
        double lp = testing_ref::LossSum(c, layout, ref, rb);
        ref[u][i] = orig - eps;
        double lm = testing_ref::LossSum(c, layout, ref, rb);
        ref[u][i] = orig;
        double fd = scale * (lp - lm) / (2 * eps);
        double got = r.grads[u][i];
        double err = std::abs(got - fd) / std::max(1e-3, std::abs(fd));
        max_err = std::max(max_err, err);
        EXPECT_LT(err, 2e-3) << k.name << " " << t.hf_name << "[" << i - t.offset << "]: analytic " << got
                             << " vs finite difference " << fd;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
  RecordProperty("max_rel_err", std::to_string(max_err));

  // Activation checkpointing recomputes the same forward: identical gradients.
  Result ck = RunModel(c, rb, units, /*checkpointing=*/true, scale);
  EXPECT_EQ(ck.loss, r.loss);
  for (int u = 0; u < layout.num_units(); ++u) EXPECT_EQ(ck.grads[u], r.grads[u]) << "unit " << u;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ModelGradTest,
                         ::testing::Values(Case{"gqa_untied", 4, 2, false, false}, Case{"mha_untied", 4, 4, false, false},
                                           Case{"gqa_tied", 4, 2, true, false}, Case{"mha_tied", 2, 2, true, false},
                                           Case{"gqa_packed", 4, 1, false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace shard
