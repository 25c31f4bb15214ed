// Cached decoding (KvDecoder) against the uncached forward (LlamaModel::
// ForwardLogits over the whole prefix) for every family, token by token and
// with the prompt in chunks; its work per token is linear in the length; the
// sampler's greedy, top-k, top-p and temperature rules.
#include "shard/model/kv_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "shard/model/init.h"
#include "shard/model/llama_model.h"
#include "shard/model/sampling.h"
#include "shard/train/local_params.h"

namespace shard {
namespace {

LlamaConfig Tiny(ModelFamily f) {
  LlamaConfig c;
  c.family = f;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-6;
  if (f == ModelFamily::kQwen3) c.explicit_head_dim = 10;
  if (f == ModelFamily::kMistral) c.sliding_window = 32;
  return c;
}

// The cached logits after every prefix of a 20-token sequence (prompt of 7 in
// chunks of 3, then one token at a time) against the uncached forward.
void ExpectCachedMatchesUncached(const LlamaConfig& c, double tol = 2e-5) {
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  const ParamLayout layout = ParamLayout::ForLlama(c);
  std::vector<std::vector<float>> units(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    units[u].resize(layout.units[u].numel);
    InitUnitParams(layout.units[u], u, 4, 0.2f, 0, layout.units[u].numel, units[u].data());
    for (const auto& t : layout.units[u].tensors)  // biases and norms away from 0 / 1
      if (t.shape.size() == 1)
        for (int64_t i = 0; i < t.numel; ++i) units[u][t.offset + i] += 0.3f * std::cos(1.0f + i);
  }
  auto params = LocalParams::Create(backend->get(), layout, false);
  ASSERT_TRUE(params.ok());
  ASSERT_TRUE((*params)->LoadUnits(units).ok());

  const int64_t T = 20;
  std::vector<int32_t> seq;
  for (int i = 0; i < T; ++i) seq.push_back((i * 7 + 3) % 37);
  ModelOptions mo;
  mo.max_seq = T;
  auto model = LlamaModel::Create(c, backend->get(), mo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<int32_t> pos(T);
  for (int i = 0; i < T; ++i) pos[i] = i;
  auto full_logits = [&](int64_t len) {  // logits after seq[0..len) without a cache
    DeviceBatch b{1, len, seq.data(), nullptr, pos.data(), nullptr};
    auto l = (*model)->ForwardLogits(b, **params, {len - 1});
    EXPECT_TRUE(l.ok());
    return std::vector<float>(*l, *l + c.vocab_size);
  };

  // Prompt of 7 in chunks of 3 (3, 3, 1), then one token at a time.
  auto dec = KvDecoder::Create(c, backend->get(), T, 3);
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  auto out = (*dec)->Append(std::span<const int32_t>(seq.data(), 7), **params);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  double worst = 0;
  for (int64_t len = 7; len <= T; ++len) {
    const std::vector<float> ref = full_logits(len);
    for (int64_t v = 0; v < c.vocab_size; ++v) worst = std::max(worst, static_cast<double>(std::abs((*out)[v] - ref[v])));
    if (len == T) break;
    const int64_t before = (*dec)->score_entries();
    out = (*dec)->Append(std::span<const int32_t>(&seq[len], 1), **params);
    ASSERT_TRUE(out.ok());
    // One new query against len + 1 cached keys, per head and layer: linear in the length.
    EXPECT_EQ((*dec)->score_entries() - before, c.num_layers * c.num_heads * (len + 1));
  }
  EXPECT_LT(worst, tol) << c.family_name();
  EXPECT_EQ((*dec)->length(), T);
  EXPECT_FALSE((*dec)->Append(std::span<const int32_t>(seq.data(), 1), **params).ok());  // past max_len
  std::printf("kv cache vs uncached, %s: max |logit diff| %.2e over %lld steps\n", c.family_name(), worst,
              static_cast<long long>(T - 6));
}

class KvDecoderTest : public ::testing::TestWithParam<ModelFamily> {};

TEST_P(KvDecoderTest, MatchesTheUncachedForwardAndCostsLinearWork) { ExpectCachedMatchesUncached(Tiny(GetParam())); }

// Mixtures of experts decode through the same MoeMlp as training: mixtral
// (every layer sparse), qwen3_moe, qwen2_moe (its shared expert), each qwen
// family also with a dense layer between sparse ones (mlp_only_layers). Shrunk presets (vocab 37, 3 layers); the
// presets are 4x wider than Tiny() (d 128), so fp32's different summation
// order between the chunked and the whole-prefix GEMMs reaches ~3e-5: 1e-4.
// A token routed to another expert would differ by orders more.
TEST(KvDecoderMoeTest, MatchesTheUncachedForward) {
  for (const char* name : {"tiny-mixtral", "tiny-qwen3-moe", "tiny-qwen2-moe"}) {
    for (bool dense_middle : {false, true}) {
      LlamaConfig c = *LlamaPreset(name);
      c.vocab_size = 37;
      c.num_layers = 3;
      c.max_position_embeddings = 64;
      if (dense_middle) {
        if (c.family == ModelFamily::kMixtral) continue;  // mixtral has no dense layers
        c.moe.mlp_only_layers = {1};
      }
      SCOPED_TRACE(std::string(name) + (dense_middle ? " with a dense layer 1" : ""));
      ASSERT_TRUE(c.Validate().ok()) << c.Validate().ToString();
      ExpectCachedMatchesUncached(c, 1e-4);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, KvDecoderTest,
                         ::testing::Values(ModelFamily::kLlama, ModelFamily::kMistral, ModelFamily::kQwen2,
                                           ModelFamily::kQwen3),
                         [](const auto& info) { return std::string(EnumToName(kModelFamilyNames, info.param)); });

TEST(KvDecoderLimitsTest, SlidingWindowAndPositionsAreRefused) {
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  auto over_window = KvDecoder::Create(Tiny(ModelFamily::kMistral), backend->get(), 33, 8);
  ASSERT_FALSE(over_window.ok());
  EXPECT_NE(over_window.status().message().find("sliding_window 32"), std::string::npos);
  EXPECT_FALSE(KvDecoder::Create(Tiny(ModelFamily::kLlama), backend->get(), 65, 8).ok());
}

TEST(SamplingTest, GreedyTopKTopPAndTemperature) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  std::mt19937_64 rng(1);
  EXPECT_EQ(SampleToken(logits, {0.0, 0, 1.0}, rng), 1);  // greedy
  EXPECT_EQ(SampleToken(logits, {1.0, 1, 1.0}, rng), 1);  // top-k 1
  EXPECT_EQ(SampleToken(logits, {1.0, 0, 0.5}, rng), 1);  // p(1) = 0.64 >= 0.5
  std::map<int, int> seen;
  for (int i = 0; i < 20000; ++i) ++seen[SampleToken(logits, {1.0, 2, 1.0}, rng)];
  EXPECT_EQ(seen.size(), 2u);  // only the two most likely
  const double want = std::exp(2.0) / (std::exp(2.0) + std::exp(3.0));  // ~0.269
  EXPECT_NEAR(seen[2] / 20000.0, want, 0.015);
  seen.clear();
  for (int i = 0; i < 20000; ++i) ++seen[SampleToken(logits, {1.0, 0, 0.9}, rng)];
  EXPECT_EQ(seen.size(), 3u);  // 0.64 + 0.24 = 0.88 < 0.9: three tokens
  // Same seed, same draws.
  std::mt19937_64 a(7), b(7);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleToken(logits, {0.8, 0, 0.95}, a), SampleToken(logits, {0.8, 0, 0.95}, b));
  EXPECT_FALSE(ValidateSampling({-1.0, 0, 1.0}).ok());
  EXPECT_FALSE(ValidateSampling({1.0, -2, 1.0}).ok());
  EXPECT_FALSE(ValidateSampling({1.0, 0, 0.0}).ok());
  EXPECT_TRUE(ValidateSampling({0.7, 50, 0.9}).ok());
}

}  // namespace
}  // namespace shard
