// The CUDA backend's mixture-of-experts ops (cuda_moe.cu) against the CPU
// reference (shard/backend/cpu/cpu_moe.cc) on random inputs: routing (probs,
// the selected experts, the stable grouping perm/offsets exactly), its
// backward, the permute (exact), the weighted combine and its backward.
// Tolerances: probs/weights rtol 1e-5 atol 1e-6 (expf vs std::exp); the
// combine's sums run in the same slot order (rtol 1e-5); dot products in double.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/gpu/gpu_test_util.h"

namespace shard {
namespace {

using gpu_testing::Down;
using gpu_testing::ExpectClose;
using gpu_testing::Random;
using gpu_testing::Up;

using CudaMoeTest = gpu_testing::GpuVsCpuTest;

std::vector<int32_t> Ints(const std::vector<float>& f, size_t n) {
  std::vector<int32_t> out(n);
  std::memcpy(out.data(), f.data(), n * sizeof(int32_t));
  return out;
}

struct Routed {
  std::vector<float> probs, weight, d_logits, permuted, combined, dy, d_weight;
  std::vector<int32_t> expert, perm, offsets;
};

// Every MoE op once on `be`, from the same host inputs.
Routed RunMoe(Backend* be, int64_t rows, int E, int k, bool renorm, int64_t dim, uint32_t seed) {
  const int64_t n = rows * k;
  DeviceBuffer logits = Up(be, Random(rows * E, seed, -3.0f, 3.0f));
  auto make = [&](int64_t count) { return std::move(DeviceBuffer::Create(be, std::max<int64_t>(count, 1)).value()); };
  DeviceBuffer probs = make(rows * E), expert = make(n), weight = make(n), perm = make(n), offsets = make(E + 1);
  MoeRouting r;
  r.rows = rows, r.experts = E, r.k = k, r.renormalize = renorm;
  r.probs = probs.data(), r.weight = weight.data();
  r.expert = reinterpret_cast<int32_t*>(expert.data()), r.perm = reinterpret_cast<int32_t*>(perm.data());
  r.offsets = reinterpret_cast<int32_t*>(offsets.data());
  EXPECT_TRUE(be->MoeRoute(logits.data(), r).ok());
  DeviceBuffer dw = Up(be, Random(n, seed + 1)), dp = Up(be, Random(rows * E, seed + 2)), dl = make(rows * E);
  EXPECT_TRUE(be->MoeRouteBackward(r, dw.data(), dp.data(), dl.data()).ok());
  DeviceBuffer x = Up(be, Random(rows * dim, seed + 3)), xp = make(n * dim);
  EXPECT_TRUE(be->MoePermute(x.data(), r.perm, n, k, dim, xp.data()).ok());
  DeviceBuffer y = Up(be, Random(n * dim, seed + 4)), out = Up(be, Random(rows * dim, seed + 5));
  EXPECT_TRUE(be->MoeUnpermute(y.data(), r.perm, r.weight, n, k, dim, out.data()).ok());
  DeviceBuffer dout = Up(be, Random(rows * dim, seed + 6)), dy = make(n * dim), dweight = make(n);
  EXPECT_TRUE(be->MoeUnpermuteBackward(dout.data(), y.data(), r.perm, r.weight, n, k, dim, dy.data(), dweight.data()).ok());
  Routed o;
  o.probs = Down(be, probs), o.weight = Down(be, weight), o.d_logits = Down(be, dl), o.permuted = Down(be, xp);
  o.combined = Down(be, out), o.dy = Down(be, dy), o.d_weight = Down(be, dweight);
  o.expert = Ints(Down(be, expert), n), o.perm = Ints(Down(be, perm), n), o.offsets = Ints(Down(be, offsets), E + 1);
  return o;
}

TEST_F(CudaMoeTest, RoutePermuteCombineAndBackwardsMatchCpu) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  struct Case { int64_t rows; int E, k; bool renorm; int64_t dim; };
  for (const Case& c : {Case{37, 8, 2, true, 64}, Case{200, 128, 8, true, 96}, Case{64, 4, 2, false, 33},
                        Case{5, 16, 1, true, 7}}) {
    const std::string what = "rows " + std::to_string(c.rows) + " E " + std::to_string(c.E) + " k " + std::to_string(c.k);
    SCOPED_TRACE(what);
    const Routed g = RunMoe(gpu_.get(), c.rows, c.E, c.k, c.renorm, c.dim, 7);
    const Routed w = RunMoe(cpu_.get(), c.rows, c.E, c.k, c.renorm, c.dim, 7);
    EXPECT_EQ(g.expert, w.expert);
    EXPECT_EQ(g.offsets, w.offsets);
    EXPECT_EQ(g.perm, w.perm);
    ExpectClose(g.probs, w.probs, 1e-5, 1e-6, what + " probs");
    ExpectClose(g.weight, w.weight, 1e-5, 1e-6, what + " weight");
    ExpectClose(g.d_logits, w.d_logits, 1e-4, 1e-6, what + " d_logits");
    EXPECT_EQ(g.permuted, w.permuted);
    ExpectClose(g.combined, w.combined, 1e-5, 1e-6, what + " combine");
    ExpectClose(g.dy, w.dy, 1e-6, 1e-7, what + " dy");
    ExpectClose(g.d_weight, w.d_weight, 1e-5, 1e-5, what + " d_weight");
  }
}

}  // namespace
}  // namespace shard
