// Packing against the model: the loss (and the gradients) of a packed batch
// equal the sums over its samples computed alone, with the same weights. So no
// attention leaks across sample boundaries and positions restart per sample,
// in the forward and the backward pass.
#include <gtest/gtest.h>

#include <random>

#include "shard/data/packing.h"
#include "shard/model/llama_model.h"
#include "shard/train/local_params.h"

namespace shard {
namespace {

LlamaConfig SmallConfig() {
  LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

struct Harness {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<LocalParams> params;
  Harness(const LlamaConfig& c, int64_t batch, int64_t seq) {
    backend = CreateBackend("cpu").value();
    ModelOptions mo;
    mo.max_batch = batch;
    mo.max_seq = seq;
    model = LlamaModel::Create(c, backend.get(), mo).value();
    params = LocalParams::Create(backend.get(), model->layout(), /*with_grads=*/true).value();
    params->InitRandom(17, 0.2f);
  }
  // Loss sum and the flattened gradients of one micro-batch.
  std::pair<double, std::vector<float>> Run(int64_t rows, int64_t T, const std::vector<int32_t>& tok,
                                            const std::vector<int32_t>& tgt, const std::vector<int32_t>& pos,
                                            const std::vector<int32_t>& seg) {
    DeviceBatch b{rows, T, tok.data(), tgt.data(), pos.data(), seg.data()};
    params->ZeroGrads();
    auto loss = model->ForwardBackward(b, *params, 1.0f);
    EXPECT_TRUE(loss.ok()) << loss.status().ToString();
    auto fwd = model->ForwardLoss(b, *params);
    EXPECT_TRUE(fwd.ok());
    EXPECT_NEAR(*fwd, *loss, 1e-5 * std::abs(*loss));
    std::vector<float> g;
    for (int u = 0; u < model->layout().num_units(); ++u)
      g.insert(g.end(), params->grads(u), params->grads(u) + model->layout().units[u].numel);
    return {*loss, g};
  }
};

TEST(PackedLossTest, PackedBatchEqualsSamplesAlone) {
  const LlamaConfig c = SmallConfig();
  const int64_t T = 24, rows = 2;
  // Samples of assorted lengths and prompt lengths.
  std::mt19937 rng(3);
  std::vector<std::vector<uint32_t>> toks;
  std::vector<std::vector<uint8_t>> masks;
  for (int len : {7, 5, 9, 4, 11, 6, 8}) {
    toks.emplace_back();
    masks.emplace_back();
    const int prompt = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < len; ++i) {
      toks.back().push_back(rng() % c.vocab_size);
      masks.back().push_back(i >= prompt);
    }
  }
  auto view = [&](int64_t s) { return SampleView{toks[s].data(), masks[s].data(), static_cast<int64_t>(toks[s].size())}; };
  PackingOptions o;
  o.seq_len = T;
  const int64_t n = static_cast<int64_t>(toks.size());
  auto plan = PlanBatch(0, rows, o, n, [n](int64_t p) { return p % n; }, view);
  ASSERT_TRUE(plan.ok());
  int packed_samples = 0;
  for (const auto& r : plan->rows) packed_samples += static_cast<int>(r.size());
  ASSERT_GE(packed_samples, 5) << "several samples share each row";

  std::vector<int32_t> tok(rows * T), tgt(rows * T), pos(rows * T), seg(rows * T);
  for (int64_t r = 0; r < rows; ++r)
    FillRow(plan->rows[r], o, view, &tok[r * T], &tgt[r * T], &pos[r * T], &seg[r * T]);
  Harness h(c, rows, T);
  auto [packed_loss, packed_grad] = h.Run(rows, T, tok, tgt, pos, seg);

  double sum = 0;
  std::vector<double> grad_sum(packed_grad.size(), 0.0);
  int64_t targets = 0;
  for (const auto& row : plan->rows) {
    for (const PackedSpan& span : row) {
      std::vector<int32_t> t1(T), g1(T), p1(T), s1(T);
      FillRow({span}, o, view, t1.data(), g1.data(), p1.data(), s1.data());
      auto [l, g] = h.Run(1, T, t1, g1, p1, s1);
      sum += l;
      for (size_t i = 0; i < g.size(); ++i) grad_sum[i] += g[i];
      targets += SpanTargets(view(span.sample), span.take);
    }
  }
  EXPECT_EQ(targets, plan->target_tokens);
  EXPECT_NEAR(packed_loss, sum, 1e-5 * std::abs(sum));
  double max_err = 0, max_g = 0;
  for (size_t i = 0; i < grad_sum.size(); ++i) {
    max_err = std::max(max_err, std::abs(packed_grad[i] - grad_sum[i]));
    max_g = std::max(max_g, std::abs(grad_sum[i]));
  }
  EXPECT_LT(max_err, 1e-4 * max_g) << "gradients of the packed batch differ from the per-sample sums";

  // Control: without segment ids the same packed row attends across samples and the loss changes.
  DeviceBatch leaky{rows, T, tok.data(), tgt.data(), pos.data(), nullptr};
  auto leak = h.model->ForwardLoss(leaky, *h.params);
  ASSERT_TRUE(leak.ok());
  EXPECT_GT(std::abs(*leak - sum), 1e-3 * std::abs(sum)) << "the test would not notice a leak";
}

}  // namespace
}  // namespace shard
