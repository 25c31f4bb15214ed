// Whole-model checks: the float model's loss and hand-written gradients against
// an independent double-precision reference with central finite differences,
// for GQA and non-GQA, tied and untied heads, packed segments, and with
// activation checkpointing (which must give bit-identical gradients); then the
// row-chunked LM head and loss (ModelOptions::loss_chunk_rows) against the
// unchunked one.
#include <gtest/gtest.h>

#include <cstdio>
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
                bool checkpointing, float grad_scale, int64_t chunk_rows = 0) {
  auto backend = CreateBackend("cpu");
  EXPECT_TRUE(backend.ok());
  ModelOptions mo;
  mo.max_batch = rb.B;
  mo.max_seq = rb.T;
  mo.activation_checkpointing = checkpointing;
  mo.loss_chunk_rows = chunk_rows;
  auto model = LlamaModel::Create(c, backend->get(), mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  // Small vocabulary: auto (0) never chunks; explicit sizes are capped at the rows.
  EXPECT_EQ((*model)->loss_chunk_rows(), chunk_rows == 0 ? rb.B * rb.T : std::min<int64_t>(chunk_rows, rb.B * rb.T));
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
  // The same check with the head and loss in chunks of 3 rows (14 rows: 3,3,3,3,2).
  Result rc = RunModel(c, rb, units, /*checkpointing=*/false, scale, /*chunk_rows=*/3);
  double ref_loss = testing_ref::LossSum(c, layout, ref, rb);
  EXPECT_NEAR(r.loss, ref_loss, 1e-4 * std::abs(ref_loss));
  EXPECT_NEAR(rc.loss, ref_loss, 1e-4 * std::abs(ref_loss));

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
        for (const Result* res : {&r, &rc}) {
          double got = res->grads[u][i];
          double err = std::abs(got - fd) / std::max(1e-3, std::abs(fd));
          max_err = std::max(max_err, err);
          EXPECT_LT(err, 2e-3) << k.name << (res == &rc ? " chunked " : " ") << t.hf_name << "[" << i - t.offset
                               << "]: analytic " << got << " vs finite difference " << fd;
        }
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

// Largest |a - b| over a unit's gradient, relative to the largest |a|.
// Every unit's flat parameters, initialised as the trainer does (std 0.3).
std::vector<std::vector<float>> InitUnits(const ParamLayout& layout, uint64_t seed) {
  std::vector<std::vector<float>> units(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    units[u].resize(layout.units[u].numel);
    InitUnitParams(layout.units[u], u, seed, 0.3f, 0, layout.units[u].numel, units[u].data());
  }
  return units;
}

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(a[i])));
  }
  return diff / scale;
}

// Chunked vs unchunked head and loss on the same weights and batch (2 x 7 = 14
// rows, every case has non-target positions, gqa_packed has packed segments).
// Tolerances: loss to 1e-12 relative (doubles summed per chunk instead of per
// row block); each unit's gradient to 1e-5 of its largest entry: dW_head sums
// its rows' outer products chunk by chunk (another fp32 order), and dX per row
// is the same dot products but the GEMM may block them differently for
// another m, which then flows into every other gradient. One chunk holding all
// rows (14, or 100 capped to 14) is the unchunked computation: bitwise.
TEST_P(ModelGradTest, ChunkedHeadMatchesUnchunked) {
  const Case k = GetParam();
  LlamaConfig c = SmallConfig(k);
  ParamLayout layout = ParamLayout::ForLlama(c);
  const std::vector<std::vector<float>> units = InitUnits(layout, 7);
  auto rb = MakeBatch(2, 7, static_cast<int>(c.vocab_size), k.segments, 9);
  const float scale = 1.0f / 11;
  Result base = RunModel(c, rb, units, false, scale, /*chunk_rows=*/0);
  ASSERT_GT(base.loss, 0);
  double worst = 0;
  for (int64_t chunk : {1, 3, 7, 13, 14, 100}) {
    Result r = RunModel(c, rb, units, false, scale, chunk);
    if (chunk >= 14) {
      EXPECT_EQ(r.loss, base.loss) << "chunk " << chunk;
      for (int u = 0; u < layout.num_units(); ++u) EXPECT_EQ(r.grads[u], base.grads[u]) << "chunk " << chunk;
      continue;
    }
    EXPECT_NEAR(r.loss, base.loss, 1e-6 * base.loss) << "chunk " << chunk;
    for (int u = 0; u < layout.num_units(); ++u) {
      double d = MaxRelDiff(base.grads[u], r.grads[u]);
      worst = std::max(worst, d);
      EXPECT_LT(d, 1e-5) << k.name << " chunk " << chunk << " unit " << u;
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", worst);
  RecordProperty("max_grad_rel_diff", buf);
}

// Evaluation: ForwardLoss in chunks equals the unchunked one; ForwardLogits of
// chosen rows equals those rows alone, and their host-side cross-entropy sums
// to ForwardLoss; requests beyond the logits buffer or the batch fail.
TEST_P(ModelGradTest, ChunkedEvaluationPaths) {
  const Case k = GetParam();
  LlamaConfig c = SmallConfig(k);
  ParamLayout layout = ParamLayout::ForLlama(c);
  const std::vector<std::vector<float>> units = InitUnits(layout, 3);
  auto rb = MakeBatch(2, 7, static_cast<int>(c.vocab_size), k.segments, 4);
  auto seg = rb.segments;
  DeviceBatch b{rb.B, rb.T, rb.tokens.data(), rb.targets.data(), rb.positions.data(),
                seg.empty() ? nullptr : seg.data()};
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  auto make = [&](int64_t chunk) {
    ModelOptions mo;
    mo.max_batch = rb.B;
    mo.max_seq = rb.T;
    mo.loss_chunk_rows = chunk;
    auto m = LlamaModel::Create(c, backend->get(), mo);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::move(*m);
  };
  auto full = make(0), chunked = make(3);
  EXPECT_EQ(chunked->max_logits_rows(), 3);
  auto params = LocalParams::Create(backend->get(), layout, true);
  ASSERT_TRUE(params.ok());
  ASSERT_TRUE((*params)->LoadUnits(units).ok());
  auto l_full = full->ForwardLoss(b, **params);
  auto l_chunk = chunked->ForwardLoss(b, **params);
  ASSERT_TRUE(l_full.ok() && l_chunk.ok());
  EXPECT_NEAR(*l_chunk, *l_full, 1e-6 * *l_full);

  const int64_t V = c.vocab_size;
  double host_loss = 0;
  std::vector<float> one(V), three(3 * V);
  auto picked = chunked->ForwardLogits(b, **params, {13, 0, 6});
  ASSERT_TRUE(picked.ok()) << picked.status().ToString();
  std::copy(*picked, *picked + 3 * V, three.begin());  // CPU backend: host memory
  for (int64_t row = 0; row < rb.B * rb.T; ++row) {
    auto lg = full->ForwardLogits(b, **params, {row});
    ASSERT_TRUE(lg.ok());
    std::copy(*lg, *lg + V, one.begin());
    for (int j = 0; j < 3; ++j)
      if (row == (j == 0 ? 13 : j == 1 ? 0 : 6))
        for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(three[j * V + v], one[v], 1e-5) << "row " << row;
    const int t = rb.targets[row];
    if (t < 0) continue;
    double mx = *std::max_element(one.begin(), one.end()), se = 0;
    for (float x : one) se += std::exp(x - mx);
    host_loss += mx + std::log(se) - one[t];
  }
  EXPECT_NEAR(host_loss, *l_full, 1e-5 * *l_full);
  EXPECT_FALSE(chunked->ForwardLogits(b, **params, {0, 1, 2, 3}).ok());  // 4 > max(3 rows, 2 sequences)
  EXPECT_FALSE(chunked->ForwardLogits(b, **params, {14}).ok());          // outside the 14 rows
  EXPECT_FALSE(chunked->ForwardLogits(b, **params, {}).ok());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ModelGradTest,
                         ::testing::Values(Case{"gqa_untied", 4, 2, false, false}, Case{"mha_untied", 4, 4, false, false},
                                           Case{"gqa_tied", 4, 2, true, false}, Case{"mha_tied", 2, 2, true, false},
                                           Case{"gqa_packed", 4, 1, false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// The auto choice: Llama 3's 128256-token vocabulary at micro-batch 2 x 2048
// gets 523-row chunks (256 MiB / 513 KB per row) instead of 4096 rows (2004 MiB).
TEST(LossChunkRowsTest, AutoAndExplicit) {
  LlamaConfig c;
  c.vocab_size = 128256;
  ModelOptions mo;
  mo.max_batch = 2;
  mo.max_seq = 2048;
  EXPECT_EQ(ResolveLossChunkRows(c, mo), 523);
  EXPECT_LE(ResolveLossChunkRows(c, mo) * c.vocab_size * 4, kAutoLogitsBudgetBytes);
  mo.loss_chunk_rows = 512;
  EXPECT_EQ(ResolveLossChunkRows(c, mo), 512);
  mo.loss_chunk_rows = 1 << 20;
  EXPECT_EQ(ResolveLossChunkRows(c, mo), 4096);  // capped at the rows
  mo.loss_chunk_rows = 0;
  c.vocab_size = 32000;
  mo.max_batch = 1;
  mo.max_seq = 256;
  EXPECT_EQ(ResolveLossChunkRows(c, mo), 256);  // 256 x 32000 x 4 B = 31 MiB fits: all rows
  c.vocab_size = 1 << 30;  // a row over budget still gets one row
  EXPECT_EQ(ResolveLossChunkRows(c, mo), 1);
}

TEST(LossChunkRowsTest, NegativeIsRefused) {
  Case k{"x", 2, 2, false, false};
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  ModelOptions mo;
  mo.loss_chunk_rows = -1;
  auto m = LlamaModel::Create(SmallConfig(k), backend->get(), mo);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().ToString().find("loss_chunk_rows"), std::string::npos) << m.status().ToString();
}

}  // namespace
}  // namespace shard
