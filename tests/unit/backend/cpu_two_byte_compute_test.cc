// GemmArgs::compute and AttentionShape::compute on the CPU backend: bf16/fp16
// inputs mean "round A and B (or q, k, v) to that type, then fp32 math" — the
// CPU stays the reference the tensor-core GPU path is checked against. Each
// case checks the bits against fp32 math on inputs rounded here with the
// scalar conversions of shard/tensor/dtype.h, that the caller's inputs are left
// alone, and that the rounding really happened (the result moved away from
// plain fp32 by more than summation noise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/tensor/dtype.h"
#include "tests/unit/backend/backend_test_util.h"

namespace shard {
namespace {

using testing::BackendTest;
using testing::BitwiseEqual;
using testing::RandomFloats;

std::vector<float> Rounded(const std::vector<float>& x, DType t) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    r[i] = t == DType::kBF16 ? BF16ToF32(F32ToBF16(x[i])) : t == DType::kF16 ? F16ToF32(F32ToF16(x[i])) : x[i];
  return r;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

struct TwoByteGemmCase {
  bool ta, tb;
  int64_t m, n, k;
  DType dt;
};

class CpuTwoByteGemmTest : public BackendTest, public ::testing::WithParamInterface<TwoByteGemmCase> {
 protected:
  struct Operands {
    int64_t lda, ldb, ldc;
    std::vector<float> a, b, c0;
  };
  // Random A, B and C0 of the case's shapes with padded leading dimensions
  // (from seeds `seed`, `seed + 1`, `seed + 2`).
  Operands MakeOperands(uint32_t seed) const {
    const TwoByteGemmCase& c = GetParam();
    const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
    const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
    Operands o{a_cols + 3, b_cols + 5, c.n + 2, {}, {}, {}};
    o.a = RandomFloats(a_rows * o.lda, seed);
    o.b = RandomFloats(b_rows * o.ldb, seed + 1);
    o.c0 = RandomFloats(c.m * o.ldc, seed + 2);
    return o;
  }
  // C = 0.75 op(A) op(B) - 0.5 C0 on device buffers, B stored as b_dtype.
  GemmArgs Args(const Operands& o, const float* a, const float* b, float* c, DType b_dtype, DType compute) const {
    const TwoByteGemmCase& p = GetParam();
    GemmArgs g;
    g.trans_a = p.ta, g.trans_b = p.tb;
    g.m = p.m, g.n = p.n, g.k = p.k;
    g.alpha = 0.75f, g.beta = -0.5f;
    g.a = a, g.lda = o.lda;
    g.b = b, g.ldb = o.ldb, g.b_dtype = b_dtype;
    g.c = c, g.ldc = o.ldc;
    g.compute = compute;
    return g;
  }
  // The GEMM on fp32 A and B (o.c0 as C0); checks that A and B are left alone.
  std::vector<float> Run(const Operands& o, const std::vector<float>& a, const std::vector<float>& b, DType compute) {
    DeviceBuffer da = Up(a), db = Up(b), dc = Up(o.c0);
    be_->Gemm(Args(o, da.data(), db.data(), dc.data(), DType::kF32, compute));
    EXPECT_TRUE(BitwiseEqual(Down(da), a)) << "A was modified";
    EXPECT_TRUE(BitwiseEqual(Down(db), b)) << "B was modified";
    return Down(dc);
  }
};

TEST_P(CpuTwoByteGemmTest, EqualsFp32ProductOfRoundedInputs) {
  const TwoByteGemmCase& c = GetParam();
  const Operands o = MakeOperands(21);
  const std::vector<float> two_byte = Run(o, o.a, o.b, c.dt);
  const std::vector<float> want = Run(o, Rounded(o.a, c.dt), Rounded(o.b, c.dt), DType::kF32);
  EXPECT_TRUE(BitwiseEqual(two_byte, want)) << "max |diff| " << MaxAbsDiff(two_byte, want);
  // Rounding to 8 (bf16) or 11 (fp16) mantissa bits moves a k-term dot
  // product far more than fp32 summation order could (~1e-6 here).
  const std::vector<float> fp32 = Run(o, o.a, o.b, DType::kF32);
  EXPECT_GT(MaxAbsDiff(two_byte, fp32), c.dt == DType::kBF16 ? 1e-3 : 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    TransposesAndTypes, CpuTwoByteGemmTest,
    ::testing::Values(TwoByteGemmCase{false, false, 5, 7, 9, DType::kBF16},
                      TwoByteGemmCase{true, false, 5, 7, 9, DType::kBF16},
                      TwoByteGemmCase{false, true, 33, 40, 64, DType::kBF16},
                      TwoByteGemmCase{true, true, 33, 40, 64, DType::kF16},
                      // Sliced across threads.
                      TwoByteGemmCase{false, true, 203, 77, 150, DType::kBF16},
                      TwoByteGemmCase{true, false, 45, 301, 170, DType::kF16}));

// The two-byte values of x as stored behind a float* (GemmArgs::b_dtype).
std::vector<uint16_t> TwoByteBits(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = t == DType::kBF16 ? F32ToBF16(x[i]) : F32ToF16(x[i]);
  return r;
}

// GemmArgs::b_dtype: a B already stored in the compute type (a two-byte
// compute copy of a weight) gives the bits of the fp32 B rounded by the GEMM;
// with fp32 compute it is widened exactly.
TEST_P(CpuTwoByteGemmTest, StoredTwoByteBEqualsTheRoundedFp32B) {
  const TwoByteGemmCase& c = GetParam();
  const Operands o = MakeOperands(41);
  const std::vector<uint16_t> bits = TwoByteBits(o.b, c.dt);
  auto stored = [&](DType compute) {
    DeviceBuffer da = Up(o.a), dc = Up(o.c0);
    auto db = DeviceBuffer::Create(be_.get(), static_cast<int64_t>((bits.size() + 1) / 2));
    EXPECT_TRUE(db.ok());
    be_->CopyToDevice(db->data(), bits.data(), bits.size() * sizeof(uint16_t));
    be_->Gemm(Args(o, da.data(), db->data(), dc.data(), c.dt, compute));
    return Down(dc);
  };
  const std::vector<float> got = stored(c.dt), want = Run(o, o.a, o.b, c.dt);
  EXPECT_TRUE(BitwiseEqual(got, want)) << "max |diff| " << MaxAbsDiff(got, want);
  const std::vector<float> wide = stored(DType::kF32);
  const std::vector<float> wide_want = Run(o, o.a, Rounded(o.b, c.dt), DType::kF32);
  EXPECT_TRUE(BitwiseEqual(wide, wide_want)) << "max |diff| " << MaxAbsDiff(wide, wide_want);
}

TEST(CpuTwoByteGemm, StoredBOfAnotherTwoByteTypeIsRefused) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok());
  std::vector<float> a(4, 1.0f), b(2, 0.0f), c(4, 0.0f);
  GemmArgs g;
  g.m = 2, g.n = 2, g.k = 2;
  g.a = a.data(), g.lda = 2, g.b = b.data(), g.ldb = 2, g.c = c.data(), g.ldc = 2;
  g.compute = DType::kBF16;
  g.b_dtype = DType::kF16;
  EXPECT_DEATH((*be)->Gemm(g), "B stored as fp16 with compute bf16");
}

// EmbeddingForward of a two-byte table (a compute copy of the embedding)
// gathers the widened rows: the bits of an fp32 table holding the same values.
using CpuTwoByteEmbeddingTest = BackendTest;

TEST_F(CpuTwoByteEmbeddingTest, ATwoByteTableGathersItsRowsWidened) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    const int vocab = 50, dim = 24;
    const int64_t rows = 300;
    const std::vector<float> table = RandomFloats(vocab * dim, 51, -3.0f, 3.0f);
    std::vector<int32_t> tokens(rows);
    for (int64_t r = 0; r < rows; ++r) tokens[r] = static_cast<int32_t>((r * 7 + 3) % vocab);
    const std::vector<uint16_t> bits = TwoByteBits(table, dt);
    auto lp = DeviceBuffer::Create(be_.get(), static_cast<int64_t>((bits.size() + 1) / 2));
    ASSERT_TRUE(lp.ok());
    be_->CopyToDevice(lp->data(), bits.data(), bits.size() * sizeof(uint16_t));
    DeviceBuffer tk = UpInt(tokens), wide = Up(Rounded(table, dt));
    DeviceBuffer got = Filled(rows * dim, 0), want = Filled(rows * dim, 0);
    be_->EmbeddingForward(tk.as_int(), rows, lp->data(), dt, dim, got.data());
    be_->EmbeddingForward(tk.as_int(), rows, wide.data(), DType::kF32, dim, want.data());
    EXPECT_TRUE(BitwiseEqual(Down(got), Down(want)));
  }
}

TEST(CpuTwoByteGemm, ZeroKScalesCWithoutReadingInputs) {
  auto be = CreateBackend("cpu");
  ASSERT_TRUE(be.ok());
  std::vector<float> c = {1.0f, 2.0f, 3.0f, 4.0f};
  GemmArgs g;
  g.m = 2, g.n = 2, g.k = 0;
  g.beta = 2.0f;
  g.c = c.data(), g.ldc = 2;
  g.compute = DType::kBF16;  // a and b are null: a rounding pass would crash
  (*be)->Gemm(g);
  EXPECT_EQ(c, (std::vector<float>{2.0f, 4.0f, 6.0f, 8.0f}));
}

class CpuTwoByteAttentionTest : public BackendTest {
 protected:
  struct Result {
    std::vector<float> out, lse, dqkv;
  };
  Result Run(AttentionShape s, const std::vector<float>& qkv, const std::vector<int32_t>& seg,
             const std::vector<float>& dout) {
    const int64_t rows = s.batch * s.seq;
    DeviceBuffer bqkv = Up(qkv), bdout = Up(dout), bseg = UpInt(seg);
    DeviceBuffer bout = Filled(rows * s.out_stride(), 0), blse = Filled(s.batch * s.n_heads * s.seq, 0);
    DeviceBuffer bdqkv = Filled(rows * s.qkv_stride(), 0);
    be_->AttentionForward(s, bqkv.data(), bseg.as_int(), bout.data(), blse.data());
    be_->AttentionBackward(s, bqkv.data(), bseg.as_int(), bout.data(), blse.data(), bdout.data(), bdqkv.data());
    EXPECT_TRUE(BitwiseEqual(Down(bqkv), qkv)) << "qkv (a saved activation) was modified";
    return {Down(bout), Down(blse), Down(bdqkv)};
  }
};

TEST_F(CpuTwoByteAttentionTest, RoundsQkvThenComputesInFp32) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    AttentionShape s{2, 37, 4, 2, 16};  // GQA, packed segments below
    const int64_t rows = s.batch * s.seq;
    const std::vector<float> qkv = RandomFloats(rows * s.qkv_stride(), 31, -2.0f, 2.0f);
    const std::vector<float> dout = RandomFloats(rows * s.out_stride(), 32);
    std::vector<int32_t> seg(rows);
    for (int64_t r = 0; r < rows; ++r) seg[r] = (r % s.seq) < 15 ? 0 : 1;

    s.compute = dt;
    const Result two_byte = Run(s, qkv, seg, dout);
    s.compute = DType::kF32;
    const Result want = Run(s, Rounded(qkv, dt), seg, dout);
    const Result fp32 = Run(s, qkv, seg, dout);
    EXPECT_TRUE(BitwiseEqual(two_byte.out, want.out));
    EXPECT_TRUE(BitwiseEqual(two_byte.lse, want.lse));
    EXPECT_TRUE(BitwiseEqual(two_byte.dqkv, want.dqkv));
    EXPECT_GT(MaxAbsDiff(two_byte.out, fp32.out), dt == DType::kBF16 ? 1e-3 : 1e-5);
  }
}

}  // namespace
}  // namespace shard
