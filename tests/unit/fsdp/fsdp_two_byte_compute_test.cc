// Two-byte compute copies (issue 19 item 2c): under a bf16/fp16 param_dtype
// with FsdpOptions::two_byte_compute_copy the model gets each unit as its
// two-byte values (UnitAccess::ParamsDType) instead of those values widened
// into an fp32 copy; its GEMMs take them as B operands (GemmArgs::b_dtype)
// and its norms, biases and embedding read them widened. The products are the
// same, so a step gives the loss and gradient shards of the fp32-copy path
// bit for bit — for every strategy, a two-byte shard, activation
// checkpointing, tied embeddings and the qwen2/qwen3 extras — while the
// runtime holds fewer transient bytes (printed; asserted exactly on a
// forward pass, whose peak does not depend on when reductions finish).
// Ranks as threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "shard/model/kv_decoder.h"
#include "shard/tensor/dtype.h"
#include "tests/unit/fsdp/model_ranks.h"

namespace shard {
namespace {

using fsdp_testing::RankOptions;
using fsdp_testing::RankResult;

struct Case {
  std::string name;
  int world;
  ShardStrategy strategy;
  ModelFamily family;
  bool tied;
  bool two_byte_shard;
  bool checkpointing;
  DType reduce;
};

class FsdpTwoByteComputeTest : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpTwoByteComputeTest, StepIsBitwiseTheFp32CopyPath) {
  const Case& k = GetParam();
  LlamaConfig c = fsdp_testing::Small();
  c.family = k.family;
  c.tie_word_embeddings = k.tied;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    RankOptions o;
    o.world = k.world;
    o.strategy = k.strategy;
    o.precision = dt;
    o.reduce = k.reduce == DType::kF32 ? DType::kF32 : dt;
    o.two_byte_shard = k.two_byte_shard;
    o.activation_checkpointing = k.checkpointing;
    const std::vector<RankResult> wide = fsdp_testing::RunRanks(c, o);
    o.two_byte_compute_copy = true;
    const std::vector<RankResult> narrow = fsdp_testing::RunRanks(c, o);
    ASSERT_EQ(wide.size(), narrow.size());
    for (int r = 0; r < k.world; ++r) {
      SCOPED_TRACE(std::string(DTypeName(dt)) + " rank " + std::to_string(r));
      EXPECT_EQ(std::bit_cast<uint64_t>(narrow[r].loss), std::bit_cast<uint64_t>(wide[r].loss));
      ASSERT_EQ(narrow[r].grads.size(), wide[r].grads.size());
      for (size_t u = 0; u < wide[r].grads.size(); ++u) {
        const auto& a = narrow[r].grads[u];
        const auto& b = wide[r].grads[u];
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "unit " << u;
      }
      if (r == 0)
        std::printf("%-28s %s: peak transient bytes %lld with fp32 compute copies, %lld two-byte\n", k.name.c_str(),
                    DTypeName(dt), static_cast<long long>(wide[r].peak_transient),
                    static_cast<long long>(narrow[r].peak_transient));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, FsdpTwoByteComputeTest,
    ::testing::Values(
        Case{"full_shard", 2, ShardStrategy::kFullShard, ModelFamily::kLlama, false, false, false, DType::kF32},
        Case{"full_shard_tied_ac", 2, ShardStrategy::kFullShard, ModelFamily::kLlama, true, false, true, DType::kF32},
        Case{"shard_grad_op_qwen2", 2, ShardStrategy::kShardGradOp, ModelFamily::kQwen2, false, false, false,
             DType::kF32},
        Case{"full_shard_qwen3_lowp_reduce", 3, ShardStrategy::kFullShard, ModelFamily::kQwen3, false, false, false,
             DType::kBF16},
        Case{"full_shard_two_byte_shard", 2, ShardStrategy::kFullShard, ModelFamily::kLlama, true, true, false,
             DType::kBF16},
        Case{"unsharded", 1, ShardStrategy::kFullShard, ModelFamily::kLlama, true, false, false, DType::kF32},
        Case{"unsharded_two_byte_shard", 1, ShardStrategy::kFullShard, ModelFamily::kQwen2, false, true, true,
             DType::kF32}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// A forward pass with prefetch (the second micro-batch): the held unit and
// the prefetched next one, both two-byte (2 B per element), against an fp32
// copy of the held unit beside a two-byte gather (up to 6 B per element while
// widening). The peak is a pure function of the unit sizes and the order.
TEST(FsdpTwoByteCompute, ForwardPeakIsTwoTwoByteUnits) {
  RankOptions o;
  o.world = 2;
  o.forward_only = true;
  const LlamaConfig c = fsdp_testing::Small();
  const auto wide = fsdp_testing::RunRanks(c, o);
  o.two_byte_compute_copy = true;
  const auto narrow = fsdp_testing::RunRanks(c, o);
  const std::vector<int64_t>& p = narrow[0].padded;  // embed, blocks, head: acquired in this order
  int64_t want = 0;
  for (size_t u = 0; u + 1 < p.size(); ++u) want = std::max(want, 2 * (p[u] + p[u + 1]));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(narrow[r].peak_transient, want) << "rank " << r;
    EXPECT_LT(narrow[r].peak_transient, wide[r].peak_transient) << "rank " << r;
  }
  std::printf("forward peak transient bytes: %lld with fp32 compute copies, %lld two-byte\n",
              static_cast<long long>(wide[0].peak_transient), static_cast<long long>(narrow[0].peak_transient));
}

// What the model is handed: ParamsDType is the precision, and the values are
// the masters rounded to it, read as stored — the gathered buffer itself, or
// an unsharded two-byte shard itself (no copy at all).
TEST(FsdpTwoByteCompute, HandsOutTheRoundedMastersAsStored) {
  const std::vector<int64_t> numels = {1000, 7, 4097};
  for (int two_byte_shard = 0; two_byte_shard < 2; ++two_byte_shard) {
    auto be = CreateBackend("cpu");
    ASSERT_TRUE(be.ok());
    FsdpOptions fo;
    fo.param_dtype = DType::kBF16;
    fo.two_byte_compute_copy = true;
    if (two_byte_shard) fo.param_shard_dtype = DType::kBF16;
    auto rt = FsdpRuntime::Create(be->get(), numels, fo, nullptr, nullptr);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    for (int u = 0; u < (*rt)->num_units(); ++u) {
      std::vector<float> master(static_cast<size_t>(numels[u]));
      for (size_t i = 0; i < master.size(); ++i) master[i] = std::sin(0.37f * static_cast<float>(i) + u) * 3.0f;
      (*be)->CastFromF32(master.data(), (*rt)->param_shard(u), numels[u], (*rt)->param_shard_dtype());
      EXPECT_EQ((*rt)->ParamsDType(u), DType::kBF16);
      auto p = (*rt)->AcquireParams(u);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      const auto* bits = reinterpret_cast<const uint16_t*>(*p);
      for (size_t i = 0; i < master.size(); ++i) ASSERT_EQ(bits[i], F32ToBF16(master[i])) << u << " " << i;
      if (two_byte_shard) {
        EXPECT_EQ(*p, (*rt)->param_shard(u)) << "the two-byte shard is the compute copy";
        EXPECT_EQ((*rt)->transient_bytes(), 0);
      } else {
        EXPECT_EQ((*rt)->transient_bytes(), ((numels[u] + 1) / 2) * 4) << "one two-byte copy";
      }
      ASSERT_TRUE((*rt)->ReleaseParams(u).ok());
      EXPECT_EQ((*rt)->transient_bytes(), 0);
    }
  }
}

// One rank's runtime over a model's units, its shards initialised.
std::unique_ptr<FsdpRuntime> OneRank(Backend* be, const ParamLayout& layout, DType param, bool two_byte) {
  std::vector<int64_t> numels;
  for (const auto& u : layout.units) numels.push_back(u.numel);
  FsdpOptions fo;
  fo.param_dtype = param;
  fo.two_byte_compute_copy = two_byte;
  auto rt = FsdpRuntime::Create(be, numels, fo, nullptr, nullptr);
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  fsdp_testing::InitShards(layout, **rt, be, 0);
  return std::move(*rt);
}

// A unit handed out in a two-byte type the GEMMs do not compute in is
// refused with one line, not multiplied as the wrong type.
TEST(FsdpTwoByteCompute, ModelRefusesAUnitOfAnotherTwoByteType) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok());
  const LlamaConfig c = fsdp_testing::Small();
  ModelOptions mo;
  mo.max_batch = 1;
  mo.max_seq = 4;
  mo.matmul_dtype = DType::kBF16;
  auto model = LlamaModel::Create(c, be->get(), mo);
  ASSERT_TRUE(model.ok());
  auto rt = OneRank(be->get(), (*model)->layout(), DType::kF16, true);
  std::vector<int32_t> tokens = {1, 2, 3, 4}, targets = {2, 3, 4, 5}, pos = {0, 1, 2, 3};
  DeviceBatch b{1, 4, tokens.data(), targets.data(), pos.data(), nullptr};
  rt->BeginMicroBatch();
  auto loss = (*model)->ForwardLoss(b, *rt);
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.status().message().find("handed out as fp16 but the GEMMs compute in bf16"), std::string::npos)
      << loss.status().ToString();
}

// Cached decoding reads a two-byte unit too (fp32 GEMMs widen it exactly):
// the logits of an fp32 copy of the same rounded weights, bit for bit.
TEST(FsdpTwoByteCompute, KvDecoderReadsTwoByteUnits) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok());
  for (ModelFamily family : {ModelFamily::kLlama, ModelFamily::kQwen2, ModelFamily::kQwen3}) {
    LlamaConfig c = fsdp_testing::Small();
    c.family = family;
    c.tie_word_embeddings = family == ModelFamily::kLlama;
    const ParamLayout layout = ParamLayout::ForLlama(c);
    std::vector<float> logits[2];
    for (int two_byte = 0; two_byte < 2; ++two_byte) {
      auto rt = OneRank(be->get(), layout, DType::kBF16, two_byte == 1);
      auto dec = KvDecoder::Create(c, be->get(), 16, 8);
      ASSERT_TRUE(dec.ok());
      const std::vector<int32_t> prompt = {3, 14, 15, 9, 2};
      ASSERT_TRUE((*dec)->Append(prompt, *rt).ok());
      auto out = (*dec)->Append(std::vector<int32_t>{26}, *rt);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      logits[two_byte] = *out;
    }
    EXPECT_EQ(logits[0], logits[1]) << c.family_name();
  }
}

// fp32 precision and the option off hand out fp32, as before.
TEST(FsdpTwoByteCompute, Fp32UnitsOtherwise) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok());
  for (DType param : {DType::kF32, DType::kBF16}) {
    FsdpOptions fo;
    fo.param_dtype = param;
    fo.two_byte_compute_copy = param == DType::kF32;  // on but fp32: nothing to narrow
    auto rt = FsdpRuntime::Create(be->get(), {64, 96}, fo, nullptr, nullptr);
    ASSERT_TRUE(rt.ok());
    for (int u = 0; u < 2; ++u) EXPECT_EQ((*rt)->ParamsDType(u), DType::kF32) << DTypeName(param);
  }
}

}  // namespace
}  // namespace shard
