// Two-byte activations (ModelOptions::activation_dtype, train.precision
// bf16/fp16): the model rounds exactly where it says it does (against an
// independent double reference that rounds at those points, and not at
// others), activation checkpointing recomputes the same rounded values (bitwise
// gradients), evaluation rounds as training does, the gradients stay close to
// fp32-activation ones, and the saved activations take half the bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "shard/backend/sim/sim_backend.h"
#include "shard/model/init.h"
#include "shard/model/llama_model.h"
#include "shard/train/local_params.h"
#include "tests/unit/model/reference_llama.h"

namespace shard {
namespace {

LlamaConfig Config(int heads, int kv_heads, bool tied) {
  LlamaConfig c;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  return c;
}

testing_ref::RefBatch Batch(int B, int T, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  testing_ref::RefBatch b;
  b.B = B;
  b.T = T;
  for (int bb = 0; bb < B; ++bb)
    for (int t = 0; t < T; ++t) {
      b.tokens.push_back(static_cast<int>(rng() % V));
      b.targets.push_back(t % 5 == 4 ? -1 : static_cast<int>(rng() % V));
      b.positions.push_back(t);
    }
  return b;
}

// std 0.3 suits the d = 32 test shape; wider models take a smaller one (the
// presets' d = 128 gets 0.05), else the activations grow ~std*sqrt(d) per
// GEMM and the attention saturates.
std::vector<std::vector<float>> Units(const ParamLayout& layout, uint64_t seed, float std_dev = 0.3f) {
  std::vector<std::vector<float>> units(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    units[u].resize(layout.units[u].numel);
    InitUnitParams(layout.units[u], u, seed, std_dev, 0, layout.units[u].numel, units[u].data());
    for (const auto& t : layout.units[u].tensors)
      if (t.shape.size() == 1)
        for (int64_t i = 0; i < t.numel; ++i) units[u][t.offset + i] = 1.0f + 0.1f * std::sin(1.0f + i + u);
  }
  return units;
}

struct ModelRun {
  double loss = 0;       // ForwardBackward
  double eval_loss = 0;  // ForwardLoss on the same weights and batch
  std::vector<std::vector<float>> grads;
};

ModelRun RunModel(const LlamaConfig& c, const testing_ref::RefBatch& rb, const std::vector<std::vector<float>>& units,
             DType matmul, DType acts, bool checkpointing) {
  auto backend = CreateBackend("cpu");
  EXPECT_TRUE(backend.ok());
  ModelOptions mo;
  mo.max_batch = rb.B;
  mo.max_seq = rb.T;
  mo.activation_checkpointing = checkpointing;
  mo.matmul_dtype = matmul;
  mo.activation_dtype = acts;
  auto model = LlamaModel::Create(c, backend->get(), mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto params = LocalParams::Create(backend->get(), (*model)->layout(), true);
  EXPECT_TRUE(params.ok());
  EXPECT_TRUE((*params)->LoadUnits(units).ok());
  DeviceBatch b{rb.B, rb.T, rb.tokens.data(), rb.targets.data(), rb.positions.data(), nullptr};
  ModelRun r;
  auto eval = (*model)->ForwardLoss(b, **params);
  EXPECT_TRUE(eval.ok()) << eval.status().ToString();
  r.eval_loss = *eval;
  auto loss = (*model)->ForwardBackward(b, **params, 0.1f);
  EXPECT_TRUE(loss.ok()) << loss.status().ToString();
  r.loss = *loss;
  for (int u = 0; u < (*model)->layout().num_units(); ++u)
    r.grads.emplace_back((*params)->grads(u), (*params)->grads(u) + (*model)->layout().units[u].numel);
  return r;
}

double RoundBf16(double v) { return BF16ToF32(F32ToBF16(static_cast<float>(v))); }
double RoundF16(double v) { return F16ToF32(F32ToF16(static_cast<float>(v))); }

class TwoByteActivations : public testing::TestWithParam<DType> {};

// The reference rounds GEMM inputs (and the caller its GEMM weights) like
// matmul_dtype, and optionally every kept activation where it is produced.
// The model with two-byte activations must sit far closer to the reference
// that rounds the activations than to the one that does not, and the model
// with fp32 activations the other way round: each rounds at exactly its points.
TEST_P(TwoByteActivations, RoundsWhereTheReferenceRounds) {
  const DType dt = GetParam();
  const LlamaConfig c = Config(4, 2, false);
  const ParamLayout layout = ParamLayout::ForLlama(c);
  const auto units = Units(layout, 21);
  const auto rb = Batch(2, 9, static_cast<int>(c.vocab_size), 3);
  testing_ref::Units ref(layout.num_units());
  double (*round)(double) = dt == DType::kBF16 ? RoundBf16 : RoundF16;
  for (int u = 0; u < layout.num_units(); ++u) {
    ref[u].assign(units[u].begin(), units[u].end());
    // The GEMM weights in the two-byte type; the (untied) embedding table is
    // read as it is, its output is a kept activation.
    for (const auto& t : layout.units[u].tensors)
      if (t.shape.size() == 2 && u != ParamLayout::kEmbedUnit)
        for (int64_t i = 0; i < t.numel; ++i) ref[u][t.offset + i] = round(ref[u][t.offset + i]);
  }
  const double ref_inputs = testing_ref::LossSum(c, layout, ref, rb, {round, true, false});
  const double ref_acts = testing_ref::LossSum(c, layout, ref, rb, {round, true, true});
  const ModelRun lp = RunModel(c, rb, units, dt, dt, false);
  const ModelRun wide = RunModel(c, rb, units, dt, DType::kF32, false);
  const double gap = std::abs(ref_acts - ref_inputs);
  std::printf("%s: ref inputs-only %.9f, ref activations %.9f | model fp32 acts %.9f, two-byte acts %.9f\n",
              DTypeName(dt), ref_inputs, ref_acts, wide.eval_loss, lp.eval_loss);
  ASSERT_GT(gap, 1e-5 * std::abs(ref_acts)) << "the rounding points must move the loss measurably";
  // Every kept value is two-byte, so float-vs-double noise never builds up:
  // the model and the rounding reference agree to ~1e-8 relative.
  EXPECT_LT(std::abs(lp.eval_loss - ref_acts), 1e-6 * std::abs(ref_acts));
  EXPECT_LT(std::abs(lp.eval_loss - ref_acts), 0.01 * gap);
  // fp32 activations with bf16 GEMM inputs match the inputs-only reference as
  // closely. (With fp16 inputs the fp32 residual's float-vs-double noise
  // flips enough of fp16's finer roundings to move the loss ~6e-5 relative,
  // the same order as the gap, so that side is checked for bf16 only.)
  if (dt == DType::kBF16) EXPECT_LT(std::abs(wide.eval_loss - ref_inputs), 0.01 * gap);
}

// Checkpointing recomputes each block's forward in the backward: with
// two-byte activations it rounds at the same points, so loss and every
// gradient equal the run that kept the rounded activations, bit for bit; and
// evaluation (which keeps nothing) rounds as training does.
TEST_P(TwoByteActivations, CheckpointingAndEvaluationAreBitIdentical) {
  const DType dt = GetParam();
  for (bool tied : {false, true}) {
    const LlamaConfig c = Config(4, tied ? 4 : 1, tied);
    const ParamLayout layout = ParamLayout::ForLlama(c);
    const auto units = Units(layout, 5);
    const auto rb = Batch(2, 11, static_cast<int>(c.vocab_size), 8);
    const ModelRun kept = RunModel(c, rb, units, dt, dt, false);
    const ModelRun recomputed = RunModel(c, rb, units, dt, dt, true);
    EXPECT_EQ(kept.loss, recomputed.loss);
    EXPECT_EQ(kept.eval_loss, kept.loss);
    EXPECT_EQ(recomputed.eval_loss, recomputed.loss);
    for (int u = 0; u < layout.num_units(); ++u) EXPECT_EQ(kept.grads[u], recomputed.grads[u]) << "unit " << u;
  }
}

// The gradients with two-byte activations track the fp32-activation ones (same
// two-byte GEMM inputs) to the type's precision, and do differ from them.
TEST_P(TwoByteActivations, GradientsTrackFp32Activations) {
  const DType dt = GetParam();
  const LlamaConfig c = Config(4, 2, false);
  const ParamLayout layout = ParamLayout::ForLlama(c);
  const auto units = Units(layout, 13);
  const auto rb = Batch(2, 9, static_cast<int>(c.vocab_size), 6);
  const ModelRun lp = RunModel(c, rb, units, dt, dt, false);
  const ModelRun wide = RunModel(c, rb, units, dt, DType::kF32, false);
  EXPECT_NEAR(lp.loss, wide.loss, 1e-2 * wide.loss);
  bool differs = false;
  for (int u = 0; u < layout.num_units(); ++u) {
    double num = 0, den = 0;
    for (size_t i = 0; i < lp.grads[u].size(); ++i) {
      const double e = lp.grads[u][i] - wide.grads[u][i];
      num += e * e;
      den += static_cast<double>(wide.grads[u][i]) * wide.grads[u][i];
      differs |= e != 0;
    }
    const double rel = std::sqrt(num / den);
    std::printf("%s unit %d: relative L2 gradient difference %.2e\n", DTypeName(dt), u, rel);
    EXPECT_LT(rel, dt == DType::kBF16 ? 5e-2 : 1e-2) << "unit " << u;
  }
  EXPECT_TRUE(differs);
}

// The families' extras (qwen2 q/k/v biases, qwen3 per-head q/k norms, whose
// pre-norm heads QkvExtras keeps per layer in fp32) under two-byte
// activations: checkpointing and evaluation stay bitwise, gradients close.
TEST_P(TwoByteActivations, FamilyExtrasKeepTheirPerLayerState) {
  const DType dt = GetParam();
  for (const char* preset : {"tiny-qwen2", "tiny-qwen3"}) {
    auto c = LlamaPreset(preset);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const ParamLayout layout = ParamLayout::ForLlama(*c);
    const auto units = Units(layout, 31, 0.05f);
    const auto rb = Batch(2, 6, static_cast<int>(c->vocab_size), 12);
    const ModelRun kept = RunModel(*c, rb, units, dt, dt, false);
    const ModelRun recomputed = RunModel(*c, rb, units, dt, dt, true);
    const ModelRun wide = RunModel(*c, rb, units, dt, DType::kF32, false);
    EXPECT_EQ(kept.loss, recomputed.loss) << preset;
    EXPECT_EQ(kept.eval_loss, kept.loss) << preset;
    EXPECT_NEAR(kept.loss, wide.loss, 1e-2 * wide.loss) << preset;
    for (int u = 0; u < layout.num_units(); ++u) {
      EXPECT_EQ(kept.grads[u], recomputed.grads[u]) << preset << " unit " << u;
      double num = 0, den = 0;
      for (size_t i = 0; i < kept.grads[u].size(); ++i) {
        num += std::pow(kept.grads[u][i] - wide.grads[u][i], 2);
        den += std::pow(wide.grads[u][i], 2);
      }
      EXPECT_LT(std::sqrt(num / den), 5e-2) << preset << " unit " << u;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, TwoByteActivations, testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// Device bytes LlamaModel::Create allocates, on the simulator's backend.
int64_t ModelBytes(const LlamaConfig& c, int64_t batch, int64_t seq, DType acts, bool checkpointing) {
  auto tracker = std::make_shared<sim::MemoryTracker>();
  auto backend = sim::CreateSimBackend(tracker);
  const int64_t base = tracker->device_now();
  ModelOptions mo;
  mo.max_batch = batch;
  mo.max_seq = seq;
  mo.activation_checkpointing = checkpointing;
  mo.matmul_dtype = acts;
  mo.activation_dtype = acts;
  auto model = LlamaModel::Create(c, backend.get(), mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return tracker->device_now() - base;
}

// What is two-byte, counted: without checkpointing the L saved sets and L+1
// residuals halve, at the cost of one fp32 working set (whose statistics are
// kept per layer too) and one fp32 block input; with checkpointing the L+1
// residuals halve at the cost of the fp32 block input.
TEST(TwoByteActivationBytes, SavedSetsAndResidualsHalve) {
  const LlamaConfig c = Config(4, 2, false);
  const int64_t n = 2 * 8, d = c.hidden_size, f = c.intermediate_size, L = c.num_layers;
  const int64_t big = n * (3 * d + c.qkv_dim() + c.num_heads * c.head_dim() + 3 * f);  // per-layer saved tensors
  const int64_t stats = n * (2 + c.num_heads);
  const int64_t resid = (L + 1) * n * d;
  const int64_t f32 = ModelBytes(c, 2, 8, DType::kF32, false);
  const int64_t b16 = ModelBytes(c, 2, 8, DType::kBF16, false);
  EXPECT_EQ(f32 - b16, (L * big + resid) * 2 - big * 4 - stats * 4 - n * d * 4);
  const int64_t f32_ac = ModelBytes(c, 2, 8, DType::kF32, true);
  const int64_t b16_ac = ModelBytes(c, 2, 8, DType::kBF16, true);
  EXPECT_EQ(f32_ac - b16_ac, resid * 2 - n * d * 4);
  EXPECT_EQ(ModelBytes(c, 2, 8, DType::kF16, false), b16);
}

}  // namespace
}  // namespace shard
