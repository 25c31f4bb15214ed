// The FSDP runtime's mixed precision with ranks as threads (local communicator),
// driven directly through UnitAccess: the weights every rank computes with are
// exactly the bf16/fp16 rounding of the fp32 masters (sharded or not, gathered
// or prefetched), the masters themselves stay fp32, and a bf16 reduce-scatter
// gives exactly the ring-order rounding of the gradients, within a stated bound
// of the fp32 reduction.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <thread>

#include "shard/comm/wire_types.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "tests/unit/fsdp/runtime_ranks.h"

namespace shard {
namespace {

// Uneven sizes: none divides 3 * align, one is tiny.
const std::vector<int64_t> kNumels = {1000, 7, 4097, 301};

float Master(int u, int64_t i) {
  // Values with more mantissa than bf16/fp16 keep, over a few binades.
  return std::sin(0.37f * static_cast<float>(i) + static_cast<float>(u)) * std::ldexp(1.0f, static_cast<int>(i % 5) - 2) +
         1e-3f * static_cast<float>(i % 11);
}
float Grad(int rank, int u, int64_t i) {
  return std::cos(0.11f * static_cast<float>(i) * static_cast<float>(rank + 1) + static_cast<float>(u)) *
         std::ldexp(1.0f, static_cast<int>((i + rank) % 6) - 3);
}
float Rounded(float x, DType t) {
  return t == DType::kBF16 ? BF16ToF32(F32ToBF16(x)) : F16ToF32(F32ToF16(x));
}

void RunRanks(int world, const FsdpOptions& opts, const std::function<void(FsdpRuntime&, int)>& body,
              const std::vector<int64_t>& numels = kNumels) {
  fsdp_testing::RunRuntimeRanks(world, opts, numels, body);
}

void FillMasters(FsdpRuntime& rt, int rank) {
  for (int u = 0; u < rt.num_units(); ++u) {
    const ShardLayout& l = rt.layout(u);
    for (int64_t j = 0; j < l.shard_numel; ++j) {
      const int64_t i = l.begin(rank) + j;
      rt.param_shard(u)[j] = i < l.numel ? Master(u, i) : 0.0f;
    }
  }
}

struct Case {
  int world;
  DType dtype;
};

class FsdpMixedPrecisionTest : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpMixedPrecisionTest, EveryRankComputesWithTheRoundedMastersExactly) {
  const Case c = GetParam();
  FsdpOptions opts;
  opts.param_dtype = c.dtype;
  RunRanks(c.world, opts, [&](FsdpRuntime& rt, int rank) {
    FillMasters(rt, rank);
    // Two micro-batches: the second one prefetches (gathers unit u+1 while u is held).
    for (int mb = 0; mb < 2; ++mb) {
      rt.BeginMicroBatch();
      for (int u = 0; u < rt.num_units(); ++u) {
        auto p = rt.AcquireParams(u);
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        for (int64_t i = 0; i < rt.layout(u).numel; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>((*p)[i]), std::bit_cast<uint32_t>(Rounded(Master(u, i), c.dtype)))
              << "rank " << rank << " unit " << u << " element " << i << " micro-batch " << mb;
        ASSERT_TRUE(rt.ReleaseParams(u).ok());
      }
      ASSERT_TRUE(rt.FinishMicroBatch().ok());
    }
    EXPECT_EQ(rt.transient_bytes(), 0) << "every compute copy and gather buffer is freed";
    // The masters stay fp32: what checkpoints and export read is unrounded.
    for (int u = 0; u < rt.num_units(); ++u) {
      std::vector<float> full;
      ASSERT_TRUE(rt.GatherUnit(u, &full).ok());
      for (int64_t i = 0; i < rt.layout(u).numel; ++i) ASSERT_EQ(full[i], Master(u, i)) << u << " " << i;
    }
    // An export: every rank takes part, only rank 0 keeps the unit.
    for (int u = 0; u < rt.num_units(); ++u) {
      std::vector<float> full;
      ASSERT_TRUE(rt.GatherUnit(u, rank == 0 ? &full : nullptr).ok());
      if (rank != 0) continue;
      ASSERT_EQ(full.size(), static_cast<size_t>(rt.layout(u).numel));
      for (int64_t i = 0; i < rt.layout(u).numel; ++i) ASSERT_EQ(full[i], Master(u, i)) << u << " " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, FsdpMixedPrecisionTest,
                         ::testing::Values(Case{1, DType::kBF16}, Case{3, DType::kBF16}, Case{2, DType::kF16},
                                           Case{3, DType::kF16}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(DTypeName(i.param.dtype)) + "_W" + std::to_string(i.param.world);
                         });

// A forward pass with prefetch over equal units of N elements (a transformer's
// layers): the unit being computed is an fp32 compute copy, the prefetched
// next one waits as two bytes. fp32 holds 4N + 4N at peak; bf16 holds 4N
// (held) + 2N (prefetched), or 2N + 4N while a gathered unit is widened: the
// peak drops by a quarter, not a half. (Widening needs both buffers for a
// moment, so a large unit followed by a much smaller one can peak higher in
// bf16 than in fp32: 6N versus 4N + 4n.)
TEST(FsdpMixedPrecisionMemoryTest, PrefetchedUnitsWaitInTwoBytes) {
  const int W = 2;
  int64_t peak[2] = {0, 0};
  int64_t largest = 0;
  for (int lowp = 0; lowp < 2; ++lowp) {
    FsdpOptions opts;
    if (lowp) opts.param_dtype = DType::kBF16;
    RunRanks(W, opts, [&](FsdpRuntime& rt, int rank) {
      FillMasters(rt, rank);
      for (int mb = 0; mb < 2; ++mb) {  // the second micro-batch prefetches
        rt.BeginMicroBatch();
        for (int u = 0; u < rt.num_units(); ++u) {
          ASSERT_TRUE(rt.AcquireParams(u).ok());
          ASSERT_TRUE(rt.ReleaseParams(u).ok());
        }
        ASSERT_TRUE(rt.FinishMicroBatch().ok());
      }
      if (rank == 0) {
        peak[lowp] = rt.peak_transient_bytes();
        for (int u = 0; u < rt.num_units(); ++u) largest = std::max(largest, rt.layout(u).padded * 4);
      }
    }, std::vector<int64_t>(6, 4096));
  }
  std::printf("forward peak transient bytes: fp32 %lld, bf16 %lld (largest unit %lld bytes in fp32)\n",
              static_cast<long long>(peak[0]), static_cast<long long>(peak[1]), static_cast<long long>(largest));
  EXPECT_EQ(peak[0], 2 * largest);              // held + prefetched, both fp32
  EXPECT_EQ(peak[1], largest + largest / 2);   // an fp32 copy + a two-byte gather, never two fp32 units
}

// One micro-batch of gradients Grad(rank, u, i) through GradBuffer/GradsDone;
// returns this rank's reduced gradient shards.
std::vector<std::vector<float>> ReduceGradients(FsdpRuntime& rt, int rank) {
  rt.ZeroGrads();
  rt.BeginMicroBatch();
  for (int u = rt.num_units() - 1; u >= 0; --u) {
    auto g = rt.GradBuffer(u);
    EXPECT_TRUE(g.ok());
    for (int64_t i = 0; i < rt.layout(u).numel; ++i) (*g)[i] += Grad(rank, u, i);
    EXPECT_TRUE(rt.GradsDone(u).ok());
  }
  EXPECT_TRUE(rt.FinishMicroBatch().ok());
  EXPECT_TRUE(rt.FinishGradients().ok());
  std::vector<std::vector<float>> out;
  for (int u = 0; u < rt.num_units(); ++u)
    out.emplace_back(rt.grad_shard(u), rt.grad_shard(u) + rt.layout(u).shard_numel);
  return out;
}

TEST(FsdpMixedPrecisionReduceTest, Bf16ReduceScatterIsTheRingRoundingAndNearTheFp32Sum) {
  const int W = 3;
  std::vector<std::vector<std::vector<float>>> fp32(W), bf16(W);
  FsdpOptions opts;
  RunRanks(W, opts, [&](FsdpRuntime& rt, int r) { fp32[r] = ReduceGradients(rt, r); });
  opts.reduce_dtype = DType::kBF16;
  RunRanks(W, opts, [&](FsdpRuntime& rt, int r) {
    bf16[r] = ReduceGradients(rt, r);
    for (int u = 0; u < rt.num_units(); ++u) {
      const ShardLayout& l = rt.layout(u);
      for (int64_t j = 0; j < l.shard_numel; ++j) {
        const int64_t i = l.begin(r) + j;
        std::vector<comm::Bf16Bits> vals(W);
        double abs_sum = 0;
        for (int k = 0; k < W; ++k) {
          const float g = i < l.numel ? Grad(k, u, i) : 0.0f;
          vals[k] = comm::Bf16Bits{F32ToBF16(g)};
          abs_sum += std::fabs(g);
        }
        const float want = BF16ToF32(comm::RingOrderReduce(ReduceOp::kSum, vals.data(), W, r).bits);
        ASSERT_EQ(bf16[r][u][j], want) << "rank " << r << " unit " << u << " element " << i;
        // Bound: W input roundings and W-1 hop roundings, each at most 2^-9
        // relative of a partial sum no larger than sum |g|: < W * 2^-8 * sum |g|.
        ASSERT_LE(std::fabs(bf16[r][u][j] - fp32[r][u][j]), W * 0x1p-8 * abs_sum + 1e-30)
            << "rank " << r << " unit " << u << " element " << i;
      }
    }
  });
}

}  // namespace
}  // namespace shard
