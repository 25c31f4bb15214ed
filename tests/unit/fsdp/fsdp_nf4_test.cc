// QLoRA's NF4 frozen base in the FSDP runtime (nf4_shard.h): the record
// layout arithmetic, the CPU backend's vectorised dequantisation against the
// reference loop of shard/tensor/nf4 (bitwise, with and without double
// quantisation, rounded to bf16), and the runtime with ranks as threads: every
// rank acquires exactly the whole-unit quantisation (blocks do not depend on
// the world size), kept ranges come back exact (or bf16-rounded), unquantised
// units are untouched, export gathers the same values, and nothing stays
// allocated after a release.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "shard/fsdp/fsdp_runtime.h"
#include "shard/fsdp/nf4_shard.h"
#include "shard/tensor/nf4.h"
#include "tests/unit/fsdp/runtime_ranks.h"

namespace shard {
namespace {

TEST(Nf4Shard, RecordLayout) {
  auto layout = ComputeShardLayout(1000, 3, 64);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->shard_numel, 384);  // 1000 / 3 rounded up to whole blocks
  Nf4UnitSpec spec{true, {{10, 5}, {380, 10}, {900, 100}}};
  EXPECT_EQ(Nf4KeptRuns(*layout, spec, 0), (std::vector<std::pair<int64_t, int64_t>>{{10, 5}, {380, 4}}));
  EXPECT_EQ(Nf4KeptRuns(*layout, spec, 1), (std::vector<std::pair<int64_t, int64_t>>{{384, 6}}));
  EXPECT_EQ(Nf4KeptRuns(*layout, spec, 2), (std::vector<std::pair<int64_t, int64_t>>{{900, 100}}));
  auto f = Nf4ShardFormat::For(*layout, spec, Nf4Options{64, false});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->blocks, 6);
  EXPECT_EQ(f->keep_capacity, 100);
  EXPECT_EQ(f->absmax_off, 192);
  EXPECT_EQ(f->keep_off, 192 + 6 * 4);
  EXPECT_EQ(f->bytes, 192 + 24 + 400);
  auto dq = Nf4ShardFormat::For(*layout, spec, Nf4Options{64, true});
  ASSERT_TRUE(dq.ok());
  EXPECT_EQ(dq->groups, 1);
  EXPECT_EQ(dq->absmax_q_off, 192);
  EXPECT_EQ(dq->scale_off, 192 + 8);  // 6 int8 padded to 8
  EXPECT_EQ(dq->mean_off, 204);
  EXPECT_EQ(dq->bytes, 208 + 400);
  // A large unit without kept values: 4 bits + one fp32 per 64 = 0.5625 B/param;
  // double-quantised 0.5 + 1/64 + 4/(64*256) (+ the mean).
  auto big = ComputeShardLayout(64 * 256 * 8, 1, 64);
  auto plain = Nf4ShardFormat::For(*big, Nf4UnitSpec{true, {}}, Nf4Options{64, false});
  auto dbl = Nf4ShardFormat::For(*big, Nf4UnitSpec{true, {}}, Nf4Options{64, true});
  EXPECT_DOUBLE_EQ(plain->bytes_per_param(), 0.5625);
  const double n = 64 * 256 * 8;
  EXPECT_DOUBLE_EQ(dbl->bytes_per_param(), 0.5 + 1.0 / 64 + 4.0 / (64 * 256) + 4.0 / n);
  // A layout not aligned to the blocks is refused.
  EXPECT_FALSE(Nf4ShardFormat::For(*ComputeShardLayout(1000, 3), spec, Nf4Options{64, false}).ok());
}

TEST(Nf4Shard, CpuDequantisationIsTheReferenceBitwise) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok());
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 0.02f);
  for (int bs : {64, 128}) {
    for (bool dq : {false, true}) {
      const int64_t n = int64_t{bs} * 700;  // > 256 blocks: several double-quant groups
      std::vector<float> x(n);
      for (auto& v : x) v = g(rng);
      auto t = QuantizeNf4(x.data(), n, Nf4Options{bs, dq});
      ASSERT_TRUE(t.ok());
      std::vector<float> want(n), got(n), got_bf16(n);
      DequantizeNf4(*t, 0, n, want.data());
      Nf4Run run;
      run.codes = t->codes.data();
      run.numel = n;
      run.block_size = bs;
      if (dq) {
        run.absmax_q = t->absmax_q.data();
        run.absmax_scale = t->absmax_scale.data();
        run.absmax_mean = &t->absmax_mean;
      } else {
        run.absmax = t->absmax.data();
      }
      (*be)->DequantizeNf4(run, got.data(), DType::kF32, DType::kF32);
      EXPECT_EQ(got, want) << "block " << bs << (dq ? " double-quantised" : "");
      (*be)->DequantizeNf4(run, got_bf16.data(), DType::kBF16, DType::kF32);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got_bf16[i], BF16ToF32(F32ToBF16(want[i]))) << i;
      // Stored as two-byte values (a two-byte compute copy): the same roundings.
      for (DType dt : {DType::kBF16, DType::kF16}) {
        std::vector<uint16_t> lp(static_cast<size_t>(n));
        (*be)->DequantizeNf4(run, reinterpret_cast<float*>(lp.data()), dt, dt);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(lp[i], dt == DType::kBF16 ? F32ToBF16(want[i]) : F32ToF16(want[i])) << DTypeName(dt) << " " << i;
      }
    }
  }
}

// ---- The runtime ------------------------------------------------------------

const std::vector<int64_t> kNumels = {1000, 7, 4097};
const std::vector<Nf4UnitSpec> kSpecs = {{true, {{0, 40}, {500, 20}}}, {false, {}}, {true, {{4000, 97}}}};

float Weight(int u, int64_t i) { return 0.02f * std::sin(0.37f * static_cast<float>(i) + u) + (i % 97 == 0 ? 1.0f : 0.0f); }

// The whole unit quantised at once (what any sharding must reproduce).
std::vector<float> Expected(int u, DType round_to) {
  const int64_t n = kNumels[u];
  std::vector<float> w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = Weight(u, i);
  if (!kSpecs[u].quantize) return w;
  std::vector<float> x((n + 63) / 64 * 64, 0.0f);
  std::copy(w.begin(), w.end(), x.begin());
  for (auto [off, count] : kSpecs[u].keep) std::fill_n(x.begin() + off, count, 0.0f);
  auto t = QuantizeNf4(x.data(), static_cast<int64_t>(x.size()), Nf4Options{64, false});
  std::vector<float> out(x.size());
  DequantizeNf4(*t, 0, static_cast<int64_t>(x.size()), out.data());
  out.resize(n);
  for (auto [off, count] : kSpecs[u].keep) std::copy_n(w.begin() + off, count, out.begin() + off);
  if (round_to != DType::kF32)
    for (float& v : out) v = BF16ToF32(F32ToBF16(v));
  return out;
}

void RunRanks(int world, const FsdpOptions& opts, const std::function<void(FsdpRuntime&, int)>& body) {
  fsdp_testing::RunRuntimeRanks(world, opts, kNumels, body);
}

TEST(FsdpNf4, EveryRankAcquiresTheWholeUnitQuantisation) {
  for (int world : {1, 3}) {
    for (ShardStrategy strategy : {ShardStrategy::kFullShard, ShardStrategy::kShardGradOp}) {
      // bf16 twice: widened to an fp32 copy, and a two-byte compute copy (NF4
      // decoded straight to bf16).
      for (auto [dt, two_byte] : {std::pair{DType::kF32, false}, std::pair{DType::kBF16, false},
                                  std::pair{DType::kBF16, true}}) {
        SCOPED_TRACE("world " + std::to_string(world) + " " + StrategyName(strategy) + " " + DTypeName(dt) +
                     (two_byte ? " two-byte compute copy" : ""));
        FsdpOptions o;
        o.strategy = strategy;
        o.frozen = true;
        o.param_dtype = dt;
        o.two_byte_compute_copy = two_byte;
        o.nf4_units = kSpecs;
        RunRanks(world, o, [&](FsdpRuntime& rt, int rank) {
          for (int u = 0; u < rt.num_units(); ++u) {
            const ShardLayout& l = rt.layout(u);
            EXPECT_EQ(rt.quantized(u), kSpecs[u].quantize);
            std::vector<float> shard(l.shard_numel, 0.0f);
            for (int64_t j = 0; j < l.shard_numel; ++j)
              if (l.begin(rank) + j < l.numel) shard[j] = Weight(u, l.begin(rank) + j);
            if (rt.quantized(u)) {
              ASSERT_TRUE(rt.WriteFrozenShard(u, shard.data()).ok());
            } else {
              std::copy(shard.begin(), shard.end(), rt.param_shard(u));
            }
          }
          for (int pass = 0; pass < 2; ++pass) {  // the second pass prefetches
            rt.BeginMicroBatch();
            for (int u = 0; u < rt.num_units(); ++u) {
              auto p = rt.AcquireParams(u);
              ASSERT_TRUE(p.ok()) << p.status().ToString();
              const std::vector<float> want = Expected(u, dt);
              ASSERT_EQ(rt.ParamsDType(u), two_byte ? DType::kBF16 : DType::kF32);
              const auto* bits = reinterpret_cast<const uint16_t*>(*p);
              for (int64_t i = 0; i < kNumels[u]; ++i) {
                const float w = kSpecs[u].quantize ? want[i] : (dt == DType::kF32 ? want[i] : BF16ToF32(F32ToBF16(want[i])));
                ASSERT_EQ(two_byte ? BF16ToF32(bits[i]) : (*p)[i], w) << "unit " << u << " element " << i;
              }
              ASSERT_TRUE(rt.ReleaseParams(u).ok());
            }
            for (int u = rt.num_units() - 1; u >= 0; --u) {  // the backward's acquire/release
              ASSERT_TRUE(rt.AcquireParams(u).ok());
              ASSERT_TRUE(rt.ReleaseParams(u).ok());
            }
            ASSERT_TRUE(rt.FinishMicroBatch().ok());
            EXPECT_EQ(rt.transient_bytes(), 0);
          }
          for (int u : {0, 2}) {
            std::vector<float> out;
            ASSERT_TRUE(rt.GatherUnit(u, &out).ok());
            std::vector<float> want = Expected(u, DType::kF32);
            if (dt != DType::kF32)  // kept values are stored in the compute dtype's rounding
              for (auto [off, count] : kSpecs[u].keep)
                for (int64_t i = off; i < off + count; ++i) want[i] = BF16ToF32(F32ToBF16(want[i]));
            EXPECT_EQ(out, want) << "unit " << u;
            // An export: every rank takes part in the gather, only rank 0 keeps it.
            std::vector<float> kept;
            ASSERT_TRUE(rt.GatherUnit(u, rank == 0 ? &kept : nullptr).ok());
            if (rank == 0) {
              EXPECT_EQ(kept, want) << "unit " << u;
            }
          }
        });
      }
    }
  }
}

TEST(FsdpNf4, RefusesNf4WithoutAFrozenBase) {
  auto be = CreateBackend("cpu");
  FsdpOptions o;
  o.nf4_units = kSpecs;
  auto rt = FsdpRuntime::Create(be->get(), kNumels, o, nullptr, nullptr);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("frozen"), std::string::npos);
}

}  // namespace
}  // namespace shard
