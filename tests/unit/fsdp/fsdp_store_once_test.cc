// Two-byte transient gradients (issue 19 item 2): under a two-byte
// reduce_dtype a sharded unit's unsharded gradient is handed to the model as
// the reduce_dtype buffer itself (UnitAccess::GradBufferStoreOnce), which the
// model fills block by block through a bounded fp32 chunk — so no fp32 copy of
// the whole unit exists. Ranks as threads (local communicator): the reduced
// gradient shards are bit for bit the fp32-buffer path's (which rounds the
// same fp32 values once, later), and the runtime holds fewer transient bytes.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/unit/fsdp/model_ranks.h"

namespace shard {
namespace {

using fsdp_testing::RankOptions;
using fsdp_testing::Small;

// A run with the given precision / reduce type; `hide`: the model gets the
// fp32 full-gradient buffer, as before two-byte transient gradients existed.
std::vector<fsdp_testing::RankResult> RunRanks(const LlamaConfig& c, int world, DType precision, DType reduce,
                                               bool hide, int64_t chunk_elems) {
  RankOptions o;
  o.world = world;
  o.precision = precision;
  o.reduce = reduce;
  o.hide_store_once = hide;
  o.chunk_elems = chunk_elems;
  o.micro_batches = 1;  // peaks compared exactly below
  return fsdp_testing::RunRanks(c, o);
}

// Blocks stored straight into the bf16/fp16 buffer give the same reduced
// shards, bit for bit, as the fp32 buffer cast down at GradsDone; with
// weight-gradient chunks of 64 elements (two GEMM rows of the widest weight)
// too. The runtime's transient peak drops.
TEST(FsdpStoreOnce, TwoByteBlockGradientsAreTheCastFp32Ones) {
  const LlamaConfig c = Small();
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const auto cast = RunRanks(c, 2, dt, dt, /*hide_store_once=*/true, 0);
    const auto stored = RunRanks(c, 2, dt, dt, /*hide_store_once=*/false, 0);
    const auto chunked = RunRanks(c, 2, dt, dt, /*hide_store_once=*/false, 64);
    ASSERT_EQ(cast.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(stored[r].loss, cast[r].loss);
      for (size_t u = 0; u < cast[r].grads.size(); ++u) {
        EXPECT_EQ(stored[r].grads[u], cast[r].grads[u]) << DTypeName(dt) << " rank " << r << " unit " << u;
        EXPECT_EQ(chunked[r].grads[u], cast[r].grads[u]) << DTypeName(dt) << " chunked, rank " << r << " unit " << u;
      }
      EXPECT_LT(stored[r].peak_transient, cast[r].peak_transient) << DTypeName(dt);
      std::printf("%s rank %d: peak transient bytes %lld with fp32 unit gradients, %lld stored two-byte\n",
                  DTypeName(dt), r, static_cast<long long>(cast[r].peak_transient),
                  static_cast<long long>(stored[r].peak_transient));
    }
  }
}

// An fp32 reduce_dtype (the default) keeps the fp32 buffer: GradBufferStoreOnce
// is GradBuffer, and the results are those of a model that never asks.
TEST(FsdpStoreOnce, Fp32ReduceKeepsTheFp32Buffer) {
  const LlamaConfig c = Small();
  const auto hidden = RunRanks(c, 2, DType::kBF16, DType::kF32, true, 0);
  const auto asked = RunRanks(c, 2, DType::kBF16, DType::kF32, false, 0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(asked[r].grads, hidden[r].grads);
    EXPECT_EQ(asked[r].peak_transient, hidden[r].peak_transient);
  }
}

}  // namespace
}  // namespace shard
