// Two-byte transient gradients (issue 19 item 2): under a two-byte
// reduce_dtype a sharded unit's unsharded gradient is handed to the model as
// the reduce_dtype buffer itself (UnitAccess::GradBufferStoreOnce), which the
// model fills block by block through a bounded fp32 chunk — so no fp32 copy of
// the whole unit exists. Ranks as threads (local communicator): the reduced
// gradient shards are bit for bit the fp32-buffer path's (which rounds the
// same fp32 values once, later; chunked blocks agree to the two-byte
// rounding), and the runtime holds fewer transient bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

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

// Chunked weight gradients are GEMMs of other shapes than the whole-unit
// ones, and how OpenBLAS blocks a GEMM (so the order of its fp32 sums) depends
// on the shape and on the environment (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE).
// The fp32 sums then differ in their last bits, which now and then moves a
// value across a rounding boundary of the two-byte type: that rank's rounded
// gradient differs by one unit in the last place, and the reduced shard (the
// ranks' values summed and rounded again, possibly cancelling) by a few ulps
// of the ranks' magnitudes. So the chunked path is held to: few elements
// differ at all (a boundary crossing is rare; a wrong chunk offset or a
// missed block changes most of a unit), and none by more than 4 ulps of the
// two-byte type at the unit's largest gradient.
void ExpectTwoByteRoundingApart(const std::vector<float>& got, const std::vector<float>& want, DType dt,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double ulp = dt == DType::kBF16 ? 0x1p-7 : 0x1p-10;  // spacing relative to the magnitude
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double(w)));
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++differ;
    EXPECT_LE(std::fabs(double(got[i]) - double(want[i])), 4 * ulp * scale)
        << what << ": element " << i << " is " << got[i] << ", the cast fp32 gradient " << want[i];
  }
  EXPECT_LE(differ, std::max<size_t>(4, got.size() / 100)) << what << ": " << differ << " of " << got.size()
                                                            << " elements differ";
}

// Blocks stored straight into the bf16/fp16 buffer give the same reduced
// shards, bit for bit, as the fp32 buffer cast down at GradsDone (the same
// GEMMs, rounded once at another time). With weight-gradient chunks of 64
// elements (two GEMM rows of the widest weight) they agree to the rounding of
// the two-byte type (see above). The runtime's transient peak drops.
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
        ExpectTwoByteRoundingApart(chunked[r].grads[u], cast[r].grads[u], dt,
                                std::string(DTypeName(dt)) + " chunked, rank " + std::to_string(r) + " unit " +
                                    std::to_string(u));
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
