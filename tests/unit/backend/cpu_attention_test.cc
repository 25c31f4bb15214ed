// CPU backend: causal GQA attention (with and without packed-sample segments)
// against the double reference; backward by finite differences of it.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shard/backend/backend.h"
#include "tests/unit/backend/backend_test_util.h"
#include "tests/unit/backend/reference_ops.h"

namespace shard {
namespace {

using testing::BackendTest;
using testing::Dot;
using testing::ExpectAllNear;
using testing::RandomFloats;
using testing::ToDouble;

struct AttnCase {
  int n_heads, n_kv, head_dim;
  bool segments;
  int64_t batch = 2, seq = 7;
};

void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "heads " << c.n_heads << ", kv " << c.n_kv << ", head_dim " << c.head_dim
      << (c.segments ? ", segments" : ", no segments") << ", batch " << c.batch << ", seq " << c.seq;
}

std::string CaseName(const ::testing::TestParamInfo<AttnCase>& info) {
  const AttnCase& c = info.param;
  std::ostringstream name;  // (operator+ chains trip a GCC 12 -Wrestrict false positive)
  name << "H" << c.n_heads << "KV" << c.n_kv << "D" << c.head_dim << (c.segments ? "Seg" : "NoSeg")
       << "T" << c.seq;
  return name.str();
}

AttentionShape ShapeOf(const AttnCase& c) {
  AttentionShape s;
  s.batch = c.batch;
  s.seq = c.seq;
  s.n_heads = c.n_heads;
  s.n_kv_heads = c.n_kv;
  s.head_dim = c.head_dim;
  return s;
}

// Sequence 0: three segments (ids 0, 1, 2); sequence 1: two (ids 5, 9).
// For seq 7: {0,0,0,1,2,2,2} and {5,5,9,9,9,9,9}.
std::vector<int32_t> SegmentIds(const AttentionShape& s) {
  std::vector<int32_t> ids(s.batch * s.seq);
  const int64_t c1 = s.seq * 3 / 10 + 1, c2 = s.seq * 2 / 3, c3 = s.seq / 6 + 1;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.seq; ++t)
      ids[b * s.seq + t] = b % 2 == 0 ? (t < c1 ? 0 : t < c2 ? 1 : 2) : (t < c3 ? 5 : 9);
  return ids;
}

class CpuAttentionTest : public BackendTest {
 protected:
  struct Result {
    std::vector<float> out, lse, dqkv;
  };
  // Forward then backward on the backend; outputs start as NaN so anything not
  // written shows up.
  Result Run(const AttentionShape& s, const std::vector<float>& qkv, const std::vector<int32_t>* seg,
             const std::vector<float>& dout) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int64_t rows = s.batch * s.seq;
    DeviceBuffer bqkv = Up(qkv), bdout = Up(dout), bout = Filled(rows * s.out_stride(), nan);
    DeviceBuffer blse = Filled(s.batch * s.n_heads * s.seq, nan), bdqkv = Filled(rows * s.qkv_stride(), nan);
    DeviceBuffer bseg;
    if (seg) bseg = UpInt(*seg);
    const int32_t* segp = seg ? bseg.as_int() : nullptr;
    be_->AttentionForward(s, bqkv.data(), segp, bout.data(), blse.data());
    be_->AttentionBackward(s, bqkv.data(), segp, bout.data(), blse.data(), bdout.data(), bdqkv.data());
    return {Down(bout), Down(blse), Down(bdqkv)};
  }
  static std::vector<double> RefOut(const AttentionShape& s, const std::vector<double>& qkv,
                                    const std::vector<int32_t>* seg, std::vector<double>* lse) {
    std::vector<double> out(s.batch * s.seq * s.out_stride());
    if (lse) lse->assign(s.batch * s.n_heads * s.seq, 0.0);
    ref::Attention(s, qkv.data(), seg ? seg->data() : nullptr, out.data(), lse ? lse->data() : nullptr);
    return out;
  }
};

class CpuAttentionSmallTest : public CpuAttentionTest, public ::testing::WithParamInterface<AttnCase> {};

TEST_P(CpuAttentionSmallTest, ForwardAndBackwardMatchReference) {
  const AttnCase c = GetParam();
  const AttentionShape s = ShapeOf(c);
  const std::vector<int32_t> seg_ids = SegmentIds(s);
  const std::vector<int32_t>* seg = c.segments ? &seg_ids : nullptr;
  const std::vector<float> qkv = RandomFloats(s.batch * s.seq * s.qkv_stride(), 7, -2.0f, 2.0f);
  const std::vector<float> dout = RandomFloats(s.batch * s.seq * s.out_stride(), 8);
  const Result r = Run(s, qkv, seg, dout);

  std::vector<double> lse;
  const std::vector<double> qkvd = ToDouble(qkv), doutd = ToDouble(dout);
  ExpectAllNear(r.out, RefOut(s, qkvd, seg, &lse), 1e-5, 1e-6, "out");
  ExpectAllNear(r.lse, lse, 1e-5, 1e-6, "lse");
  testing::ExpectGradientMatches(
      r.dqkv, qkvd,
      [&](const std::vector<double>& x) { return Dot(RefOut(s, x, seg, nullptr), doutd); }, "dqkv");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuAttentionSmallTest,
    ::testing::Values(AttnCase{4, 2, 8, false}, AttnCase{4, 2, 8, true}, AttnCase{4, 2, 16, false},
                      AttnCase{4, 2, 16, true}, AttnCase{4, 4, 8, true}, AttnCase{4, 4, 16, false},
                      AttnCase{2, 1, 12, true},  // head_dim not a multiple of 8
                      AttnCase{4, 2, 8, true, 1, 45}),  // several query tiles, odd length
    CaseName);

// Segments must change the result: the same data without them differs exactly
// in the rows after the first segment boundary.
TEST_F(CpuAttentionTest, SegmentsMaskAcrossBoundaries) {
  const AttnCase c{4, 2, 8, true};
  const AttentionShape s = ShapeOf(c);
  const std::vector<int32_t> seg = SegmentIds(s);
  const std::vector<float> qkv = RandomFloats(s.batch * s.seq * s.qkv_stride(), 9);
  const std::vector<float> dout(s.batch * s.seq * s.out_stride(), 1.0f);
  const Result with = Run(s, qkv, &seg, dout), without = Run(s, qkv, nullptr, dout);
  for (int64_t t = 0; t < s.seq; ++t) {
    const bool same_row = t < 3;  // sequence 0's first segment is positions 0..2
    const float* a = with.out.data() + t * s.out_stride();
    const float* b = without.out.data() + t * s.out_stride();
    EXPECT_EQ(std::equal(a, a + s.out_stride(), b), same_row) << "position " << t;
  }
}

// Benchmark-like head size and a longer sequence: several query tiles, key
// windows that start mid-sequence. Backward checked by sampled coordinates and
// random directional derivatives of the reference.
TEST_F(CpuAttentionTest, LargerShapeMatchesReference) {
  const AttnCase c{4, 2, 32, true, 2, 64};
  const AttentionShape s = ShapeOf(c);
  const std::vector<int32_t> seg = SegmentIds(s);
  const std::vector<float> qkv = RandomFloats(s.batch * s.seq * s.qkv_stride(), 10, -1.5f, 1.5f);
  const std::vector<float> dout = RandomFloats(s.batch * s.seq * s.out_stride(), 11);
  const Result r = Run(s, qkv, &seg, dout);
  std::vector<double> lse;
  const std::vector<double> qkvd = ToDouble(qkv), doutd = ToDouble(dout);
  ExpectAllNear(r.out, RefOut(s, qkvd, &seg, &lse), 1e-4, 1e-5, "out");
  ExpectAllNear(r.lse, lse, 1e-5, 1e-5, "lse");

  auto loss = [&](const std::vector<double>& x) { return Dot(RefOut(s, x, &seg, nullptr), doutd); };
  std::mt19937 rng(12);
  std::uniform_int_distribution<size_t> pick(0, qkv.size() - 1);
  std::vector<size_t> idx;
  // First and last rows of both sequences, then random entries of q, k and v.
  for (int64_t row : {int64_t{0}, s.seq - 1, s.seq, 2 * s.seq - 1})
    for (int64_t col = 0; col < s.qkv_stride(); col += 13) idx.push_back(row * s.qkv_stride() + col);
  for (int i = 0; i < 90; ++i) idx.push_back(pick(rng));
  testing::ExpectGradientMatches(r.dqkv, qkvd, loss, "dqkv (sampled)", idx, 2e-3, 2e-4);

  for (uint32_t dir = 0; dir < 3; ++dir) {
    const std::vector<double> u = ToDouble(RandomFloats(qkv.size(), 20 + dir));
    const double eps = 1e-4;
    std::vector<double> plus = qkvd, minus = qkvd;
    for (size_t i = 0; i < u.size(); ++i) {
      plus[i] += eps * u[i];
      minus[i] -= eps * u[i];
    }
    const double fd = (loss(plus) - loss(minus)) / (2 * eps);
    const double analytic = Dot(ToDouble(r.dqkv), u);
    EXPECT_NEAR(analytic, fd, 1e-3 * std::fabs(fd) + 1e-3) << "direction " << dir;
  }
}

// Tasks never share work across threads, so results are bitwise the same for
// any pool size.
TEST_F(CpuAttentionTest, SameBitsForAnyThreadCount) {
  const AttnCase c{4, 2, 32, true, 2, 64};
  const AttentionShape s = ShapeOf(c);
  const std::vector<int32_t> seg = SegmentIds(s);
  const std::vector<float> qkv = RandomFloats(s.batch * s.seq * s.qkv_stride(), 13);
  const std::vector<float> dout = RandomFloats(s.batch * s.seq * s.out_stride(), 14);
  Result one, two;
  {
    testing::ScopedThreads t(1);
    one = Run(s, qkv, &seg, dout);
  }
  {
    testing::ScopedThreads t(2);
    two = Run(s, qkv, &seg, dout);
  }
  EXPECT_TRUE(testing::BitwiseEqual(one.out, two.out));
  EXPECT_TRUE(testing::BitwiseEqual(one.lse, two.lse));
  EXPECT_TRUE(testing::BitwiseEqual(one.dqkv, two.dqkv));
}

}  // namespace
}  // namespace shard
