// LlamaModel::ForwardBackwardSpans: the loss of per-span sums the preference
// objectives use. The spans' cross-entropy sums it reports match the double
// reference; its gradient is exactly the factor-weighted sum of each span's
// own ForwardBackward (one chunk or several, with activation checkpointing);
// and a DPO / ORPO pair's gradient through it matches central finite
// differences of the loss computed in double from the reference model.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "shard/model/init.h"
#include "shard/model/llama_model.h"
#include "shard/train/local_params.h"
#include "shard/train/preference_loss.h"
#include "tests/unit/model/reference_llama.h"

namespace shard {
namespace {

LlamaConfig Config() {
  LlamaConfig c;
  c.vocab_size = 23;
  c.hidden_size = 16;
  c.intermediate_size = 20;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 64;
  return c;
}

std::vector<std::vector<float>> Units(const ParamLayout& layout) {
  std::vector<std::vector<float>> units(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    units[u].resize(layout.units[u].numel);
    InitUnitParams(layout.units[u], u, 21, 0.3f, 0, layout.units[u].numel, units[u].data());
  }
  return units;
}

// B rows of T tokens; the first `prompt` positions of each row are not targets.
testing_ref::RefBatch Batch(int B, int T, int prompt, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  testing_ref::RefBatch b;
  b.B = B;
  b.T = T;
  for (int r = 0; r < B; ++r)
    for (int t = 0; t < T; ++t) {
      b.tokens.push_back(static_cast<int>(rng() % V));
      b.targets.push_back(t < prompt ? -1 : static_cast<int>(rng() % V));
      b.positions.push_back(t);
    }
  return b;
}

// Only the targets of rows [begin, end).
testing_ref::RefBatch Masked(testing_ref::RefBatch b, RowSpan s) {
  for (int64_t i = 0; i < static_cast<int64_t>(b.targets.size()); ++i)
    if (i < s.begin || i >= s.end) b.targets[i] = -1;
  return b;
}

struct Model {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<LocalParams> params;
};

Model Make(const LlamaConfig& c, const testing_ref::RefBatch& rb, const std::vector<std::vector<float>>& units,
           int64_t chunk_rows, bool checkpointing) {
  Model m;
  auto be = CreateBackend("cpu");
  EXPECT_TRUE(be.ok());
  m.backend = std::move(*be);
  ModelOptions mo;
  mo.max_batch = rb.B;
  mo.max_seq = rb.T;
  mo.loss_chunk_rows = chunk_rows;
  mo.activation_checkpointing = checkpointing;
  auto model = LlamaModel::Create(c, m.backend.get(), mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  m.model = std::move(*model);
  auto params = LocalParams::Create(m.backend.get(), m.model->layout(), true);
  EXPECT_TRUE(params.ok());
  m.params = std::move(*params);
  EXPECT_TRUE(m.params->LoadUnits(units).ok());
  return m;
}

DeviceBatch Device(testing_ref::RefBatch& rb) {
  return DeviceBatch{rb.B, rb.T, rb.tokens.data(), rb.targets.data(), rb.positions.data(), nullptr};
}

std::vector<std::vector<float>> Grads(Model& m) {
  std::vector<std::vector<float>> g;
  for (int u = 0; u < m.model->layout().num_units(); ++u)
    g.emplace_back(m.params->grads(u), m.params->grads(u) + m.model->layout().units[u].numel);
  return g;
}

TEST(SpanLoss, GradientIsTheFactorWeightedSumOfEachSpans) {
  const LlamaConfig c = Config();
  const ParamLayout layout = ParamLayout::ForLlama(c);
  const auto units = Units(layout);
  testing_ref::RefBatch rb = Batch(3, 7, 2, static_cast<int>(c.vocab_size), 3);
  testing_ref::Units ref(units.size());
  for (size_t u = 0; u < units.size(); ++u) ref[u].assign(units[u].begin(), units[u].end());
  // Row 14 lies in no span: its target contributes no gradient.
  const std::vector<RowSpan> spans = {{0, 7}, {7, 14}, {15, 21}};
  const std::vector<float> factors = {0.5f, -0.25f, 0.125f};
  for (int64_t chunk : {0, 4}) {
    for (bool ck : {false, true}) {
      Model m = Make(c, rb, units, chunk, ck);
      std::vector<double> seen;
      SpanLoss loss{spans, [&](const std::vector<double>& nll) -> StatusOr<std::vector<float>> {
                      seen = nll;
                      return factors;
                    }};
      auto total = m.model->ForwardBackwardSpans(Device(rb), *m.params, loss);
      ASSERT_TRUE(total.ok()) << total.status().ToString();
      EXPECT_NEAR(*total, testing_ref::LossSum(c, layout, ref, rb), 1e-4 * *total);
      ASSERT_EQ(seen.size(), spans.size());
      for (size_t s = 0; s < spans.size(); ++s) {
        const double want = testing_ref::LossSum(c, layout, ref, Masked(rb, spans[s]));
        EXPECT_NEAR(seen[s], want, 1e-4 * want) << "span " << s << " chunk " << chunk;
      }
      // The forward-only pass (the reference's) reports the same sums.
      Model f = Make(c, rb, units, chunk, ck);
      auto fwd = f.model->ForwardSpanLosses(Device(rb), *f.params, spans);
      ASSERT_TRUE(fwd.ok()) << fwd.status().ToString();
      ASSERT_EQ(fwd->size(), spans.size());
      for (size_t s = 0; s < spans.size(); ++s) EXPECT_NEAR((*fwd)[s], seen[s], 1e-12 * seen[s]);
      const auto got = Grads(m);
      // The same sum, span by span, through ForwardBackward.
      Model e = Make(c, rb, units, chunk, ck);
      for (size_t s = 0; s < spans.size(); ++s) {
        testing_ref::RefBatch one = Masked(rb, spans[s]);
        ASSERT_TRUE(e.model->ForwardBackward(Device(one), *e.params, factors[s]).ok());
      }
      const auto want = Grads(e);
      for (size_t u = 0; u < got.size(); ++u) {
        double diff = 0, scale = 1e-30;
        for (size_t i = 0; i < got[u].size(); ++i) {
          diff = std::max(diff, std::abs(static_cast<double>(got[u][i]) - want[u][i]));
          scale = std::max(scale, std::abs(static_cast<double>(want[u][i])));
        }
        EXPECT_LT(diff / scale, 1e-5) << "unit " << u << " chunk " << chunk << " checkpointing " << ck;
      }
    }
  }
}

// A pair (row 0 chosen, row 1 rejected) under DPO and ORPO: the trainer's
// factor rule (each reply's CE sum carries −dL/dS) gives dL/dθ; checked
// against central differences of L computed in double from the reference.
TEST(SpanLoss, PreferencePairGradientMatchesFiniteDifferences) {
  const LlamaConfig c = Config();
  const ParamLayout layout = ParamLayout::ForLlama(c);
  const auto units = Units(layout);
  testing_ref::RefBatch rb = Batch(2, 7, 3, static_cast<int>(c.vocab_size), 8);
  rb.targets[13] = -1;  // the rejected reply is one token shorter
  const std::vector<RowSpan> spans = {{0, 7}, {7, 14}};
  const int64_t nc = 4, nr = 3;
  for (PreferenceMethod method : {PreferenceMethod::kDpo, PreferenceMethod::kOrpo}) {
    PreferenceConfig pc;
    pc.method = method;
    pc.beta = 0.5;
    pc.label_smoothing = method == PreferenceMethod::kDpo ? 0.1 : 0.0;
    pc.orpo_lambda = 0.7;
    auto pair_of = [&](double sc, double sr) {
      return PairLogps{sc, sr, nc, nr, -12.0, -9.5};
    };
    Model m = Make(c, rb, units, 0, false);
    SpanLoss loss{spans, [&](const std::vector<double>& nll) -> StatusOr<std::vector<float>> {
                    const PairLoss p = PreferencePairLoss(pc, pair_of(-nll[0], -nll[1]));
                    return std::vector<float>{static_cast<float>(-p.d_chosen), static_cast<float>(-p.d_rejected)};
                  }};
    ASSERT_TRUE(m.model->ForwardBackwardSpans(Device(rb), *m.params, loss).ok());
    const auto got = Grads(m);
    testing_ref::Units ref(units.size());
    for (size_t u = 0; u < units.size(); ++u) ref[u].assign(units[u].begin(), units[u].end());
    auto L = [&] {
      const double sc = -testing_ref::LossSum(c, layout, ref, Masked(rb, spans[0]));
      const double sr = -testing_ref::LossSum(c, layout, ref, Masked(rb, spans[1]));
      return PreferencePairLoss(pc, pair_of(sc, sr)).loss;
    };
    std::mt19937 rng(5);
    int checked = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
      for (const auto& t : layout.units[u].tensors) {
        for (int s = 0; s < 2; ++s) {
          int64_t i = t.offset + static_cast<int64_t>(rng() % t.numel);
          if (u == 0) i = rb.tokens[rng() % rb.tokens.size()] * c.hidden_size + static_cast<int64_t>(rng() % c.hidden_size);
          const double eps = 1e-5, orig = ref[u][i];
          ref[u][i] = orig + eps;
          const double lp = L();
          ref[u][i] = orig - eps;
          const double lm = L();
          ref[u][i] = orig;
          const double fd = (lp - lm) / (2 * eps);
          const double err = std::abs(got[u][i] - fd) / std::max(1e-3, std::abs(fd));
          EXPECT_LT(err, 2e-3) << PreferenceMethodName(method) << " " << t.hf_name << "[" << i - t.offset
                               << "]: analytic " << got[u][i] << " vs finite difference " << fd;
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 20);
  }
}

TEST(SpanLoss, SpansOutsideTheBatchAreRefused) {
  const LlamaConfig c = Config();
  const ParamLayout layout = ParamLayout::ForLlama(c);
  testing_ref::RefBatch rb = Batch(1, 5, 1, static_cast<int>(c.vocab_size), 1);
  Model m = Make(c, rb, Units(layout), 0, false);
  SpanLoss loss{{{0, 6}}, [](const std::vector<double>&) -> StatusOr<std::vector<float>> { return std::vector<float>{1}; }};
  auto r = m.model->ForwardBackwardSpans(Device(rb), *m.params, loss);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside the micro-batch"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace shard
