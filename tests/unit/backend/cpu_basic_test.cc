// CPU backend: factory, memory, Gemm, elementwise ops, embedding and AdamW.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "shard/backend/backend.h"
#include "tests/unit/backend/backend_test_util.h"
#include "tests/unit/backend/reference_ops.h"

namespace shard {
namespace {

using testing::BackendTest;
using testing::ExpectAllNear;
using testing::RandomFloats;
using testing::ToDouble;

TEST(CpuBackendFactory, NamesAndErrors) {
  auto cpu = CreateBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_STREQ((*cpu)->name(), "cpu");
  // auto: the GPU when there is one, else the CPU.
  auto autob = CreateBackend("auto");
  ASSERT_TRUE(autob.ok());
  EXPECT_STREQ((*autob)->name(), NumCudaDevices() > 0 ? "cuda" : "cpu");
  auto bad = CreateBackend("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateBackend("cuda:x").status().code(), StatusCode::kInvalidArgument);
  if (NumCudaDevices() == 0) {
    auto cuda = CreateBackend("cuda");
    ASSERT_FALSE(cuda.ok());
    EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable) << cuda.status().ToString();
    EXPECT_NE(cuda.status().message().find("cuda"), std::string::npos);
  }
}

class CpuBasicTest : public BackendTest {};

TEST_F(CpuBasicTest, AllocateIsAlignedAndWritable) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{64}, size_t{65}, size_t{4096 + 4}}) {
    auto p = be_->Allocate(bytes);
    ASSERT_TRUE(p.ok()) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 64, 0u) << bytes;
    if (bytes) std::memset(*p, 0xab, bytes);
    be_->Free(*p);
  }
#ifndef __SANITIZE_ADDRESS__  // ASan aborts on impossible sizes instead of returning null
  auto huge = be_->Allocate(size_t{1} << 62);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
#endif
}

TEST_F(CpuBasicTest, CopiesRoundTrip) {
  const std::vector<float> src = RandomFloats(1001, 1);
  DeviceBuffer a = Up(src);
  DeviceBuffer b = Filled(1001, 0.0f);
  be_->Copy(b.data(), a.data(), src.size() * sizeof(float));
  be_->Synchronize();
  EXPECT_TRUE(testing::BitwiseEqual(Down(b), src));
}

TEST_F(CpuBasicTest, FillWritesExactlyN) {
  const int64_t n = 100003;
  DeviceBuffer x = Filled(n + 5, -1.0f);
  be_->Fill(x.data(), n, 2.5f);
  const std::vector<float> h = Down(x);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], 2.5f) << i;
  for (int64_t i = n; i < n + 5; ++i) EXPECT_EQ(h[i], -1.0f) << "overrun at " << i;
}

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k;
};

class CpuGemmTest : public BackendTest, public ::testing::WithParamInterface<GemmCase> {};

// Leading dimensions larger than needed, alpha != 1, beta != 0; the padding
// columns of C must stay untouched.
TEST_P(CpuGemmTest, MatchesReference) {
  const GemmCase c = GetParam();
  const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = c.n + 2;
  const std::vector<float> a = RandomFloats(a_rows * lda, 11), b = RandomFloats(b_rows * ldb, 12);
  const std::vector<float> c0 = RandomFloats(c.m * ldc, 13);
  DeviceBuffer da = Up(a), db = Up(b), dc = Up(c0);
  GemmArgs args;
  args.trans_a = c.ta;
  args.trans_b = c.tb;
  args.m = c.m;
  args.n = c.n;
  args.k = c.k;
  args.alpha = 0.75f;
  args.a = da.data();
  args.lda = lda;
  args.b = db.data();
  args.ldb = ldb;
  args.beta = -0.5f;
  args.c = dc.data();
  args.ldc = ldc;
  be_->Gemm(args);
  std::vector<double> want = ToDouble(c0);
  const std::vector<double> ad = ToDouble(a), bd = ToDouble(b);
  ref::Gemm(c.ta, c.tb, c.m, c.n, c.k, 0.75, ad.data(), lda, bd.data(), ldb, -0.5, want.data(), ldc);
  ExpectAllNear(Down(dc), want, 1e-5, 1e-5, "C");
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, CpuGemmTest,
                         ::testing::Values(GemmCase{false, false, 5, 7, 9}, GemmCase{true, false, 5, 7, 9},
                                           GemmCase{false, true, 5, 7, 9}, GemmCase{true, true, 5, 7, 9},
                                           GemmCase{false, false, 67, 81, 95},
                                           GemmCase{true, true, 67, 81, 95},
                                           // Large enough to be sliced across threads,
                                           // by rows (m > n) and by columns, ragged edges.
                                           GemmCase{false, false, 203, 77, 150},
                                           GemmCase{true, false, 203, 77, 150},
                                           GemmCase{false, true, 45, 301, 170},
                                           GemmCase{true, true, 45, 301, 170}));

TEST_F(CpuBasicTest, GemmWithZeroKScalesC) {
  DeviceBuffer dc = Up({1.0f, 2.0f, 3.0f, 4.0f});
  GemmArgs args;
  args.m = 2;
  args.n = 2;
  args.k = 0;
  args.beta = 0.5f;
  args.c = dc.data();
  args.ldc = 2;
  be_->Gemm(args);
  EXPECT_EQ(Down(dc), (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
}

TEST_F(CpuBasicTest, AddAliasingAndScale) {
  const int64_t n = 200001;  // several ParallelFor chunks
  const std::vector<float> a = RandomFloats(n, 2), b = RandomFloats(n, 3);
  DeviceBuffer da = Up(a), db = Up(b);
  be_->Add(da.data(), db.data(), da.data(), n);  // out aliases a
  std::vector<float> h = Down(da);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], a[i] + b[i]) << i;
  be_->Scale(da.data(), n, -3.0f);
  h = Down(da);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], (a[i] + b[i]) * -3.0f) << i;
}

TEST_F(CpuBasicTest, SumSquaresAccumulatesInDouble) {
  EXPECT_EQ(be_->SumSquares(nullptr, 0), 0.0);
  DeviceBuffer small = Up({1.0f, -2.0f, 3.0f});
  EXPECT_EQ(be_->SumSquares(small.data(), 3), 14.0);
  // x = 1 + 2^-12: x^2 = 1 + 2^-11 + 2^-24 is exact in double but rounds in
  // float, so a float square or float sum is off by ~6e-8 relative.
  const int64_t n = (1 << 20) + 7;
  const float x = 1.0f + std::ldexp(1.0f, -12);
  DeviceBuffer big = Filled(n, x);
  const double want = static_cast<double>(n) * (static_cast<double>(x) * x);
  EXPECT_NEAR(be_->SumSquares(big.data(), n), want, want * 1e-13);
}

TEST_F(CpuBasicTest, EmbeddingForwardGathersRows) {
  const int vocab = 11, dim = 40;
  const std::vector<float> table = RandomFloats(vocab * dim, 4);
  const std::vector<int32_t> tokens = {3, 0, 10, 3, 7};
  DeviceBuffer dt = Up(table), dtok = UpInt(tokens), dout = Filled(tokens.size() * dim, 0.0f);
  be_->EmbeddingForward(dtok.as_int(), tokens.size(), dt.data(), DType::kF32, dim, dout.data());
  std::vector<double> want(tokens.size() * dim);
  const std::vector<double> td = ToDouble(table);
  ref::Embedding(tokens.data(), tokens.size(), td.data(), dim, want.data());
  ExpectAllNear(Down(dout), want, 0.0, 0.0, "embedding");
}

// Backward is the adjoint of the gather: repeated tokens accumulate, onto what
// dtable held before. Checked against finite differences of the reference.
TEST_F(CpuBasicTest, EmbeddingBackwardAccumulatesRepeatedTokens) {
  const int vocab = 9, dim = 96;  // dim spans several column chunks
  const std::vector<int32_t> tokens = {2, 5, 2, 8, 2, 0, 5};
  const int64_t rows = tokens.size();
  const std::vector<float> table = RandomFloats(vocab * dim, 5), dy = RandomFloats(rows * dim, 6);
  const std::vector<float> prior = RandomFloats(vocab * dim, 7);
  DeviceBuffer ddy = Up(dy), dtok = UpInt(tokens), dtab = Up(prior);
  be_->EmbeddingBackward(dtok.as_int(), rows, ddy.data(), dim, dtab.data());
  std::vector<float> grad = Down(dtab);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] -= prior[i];
  const std::vector<double> dyd = ToDouble(dy);
  testing::ExpectGradientMatches(
      grad, ToDouble(table),
      [&](const std::vector<double>& t) {
        std::vector<double> y(rows * dim);
        ref::Embedding(tokens.data(), rows, t.data(), dim, y.data());
        return testing::Dot(y, dyd);
      },
      "embedding", {}, 1e-5, 1e-5);
  // Row 2 received three contributions.
  for (int j = 0; j < dim; ++j)
    EXPECT_NEAR(grad[2 * dim + j], dy[0 * dim + j] + dy[2 * dim + j] + dy[4 * dim + j], 1e-5);
}

// One scalar parameter through three torch.optim.AdamW steps; the expected
// values were computed by hand from torch's update rule in double precision.
TEST_F(CpuBasicTest, AdamWMatchesHandComputedTorchSteps) {
  DeviceBuffer p = Up({1.0f}), g = Up({0.0f}), m = Up({0.0f}), v = Up({0.0f});
  AdamWArgs args;
  args.lr = 0.1f;
  args.beta1 = 0.9f;
  args.beta2 = 0.999f;
  args.eps = 1e-8f;
  args.weight_decay = 0.01f;
  const float grads[3] = {0.5f, -0.25f, 1.0f};
  const double want_p[3] = {0.899000002, 0.8714672987058463, 0.804784672376384};
  const double want_m[3] = {0.05, 0.02, 0.118};
  const double want_v[3] = {0.00025, 0.00031225, 0.00131193775};
  for (int s = 0; s < 3; ++s) {
    be_->CopyToDevice(g.data(), &grads[s], sizeof(float));
    args.step = s + 1;
    be_->AdamW(p.data(), g.data(), m.data(), v.data(), 1, args);
    EXPECT_NEAR(Down(p)[0], want_p[s], 2e-6) << "step " << s + 1;
    EXPECT_NEAR(Down(m)[0], want_m[s], 1e-7) << "step " << s + 1;
    // AdamWArgs holds float betas: 1 - 0.999f is 1.3e-5 (relative) below 0.001,
    // which shows in v (and cancels in the bias-corrected update).
    EXPECT_NEAR(Down(v)[0], want_v[s], 2e-5 * want_v[s]) << "step " << s + 1;
  }
}

// Many elements, grad_scale and weight decay, against the double reference;
// step 1 also against the closed form p(1 - lr wd) - lr g / (|g| + eps).
TEST_F(CpuBasicTest, AdamWVectorMatchesReference) {
  const int64_t n = 50001;
  const std::vector<float> p0 = RandomFloats(n, 8);
  DeviceBuffer p = Up(p0), m = Filled(n, 0.0f), v = Filled(n, 0.0f);
  std::vector<double> rp = ToDouble(p0), rm(n, 0.0), rv(n, 0.0);
  AdamWArgs args;
  args.lr = 3e-3f;
  args.beta1 = 0.8f;
  args.beta2 = 0.95f;
  args.eps = 1e-6f;
  args.weight_decay = 0.1f;
  args.grad_scale = 0.5f;
  for (int s = 1; s <= 3; ++s) {
    const std::vector<float> grad = RandomFloats(n, 100 + s, -2.0f, 2.0f);
    DeviceBuffer dg = Up(grad);
    args.step = s;
    be_->AdamW(p.data(), dg.data(), m.data(), v.data(), n, args);
    const std::vector<double> gd = ToDouble(grad);
    if (s == 1) {
      std::vector<double> closed(n);
      for (int64_t i = 0; i < n; ++i) {
        const double gi = gd[i] * 0.5;
        closed[i] = p0[i] * (1.0 - 3e-3 * 0.1) - 3e-3 * gi / (std::fabs(gi) + 1e-6);
      }
      ExpectAllNear(Down(p), closed, 1e-5, 1e-6, "AdamW step 1 closed form");
    }
    ref::AdamW(rp.data(), gd.data(), rm.data(), rv.data(), n, args);
    ExpectAllNear(Down(p), rp, 1e-5, 1e-6, "param step " + std::to_string(s));
    ExpectAllNear(Down(m), rm, 1e-5, 1e-7, "m step " + std::to_string(s));
    ExpectAllNear(Down(v), rv, 1e-5, 1e-9, "v step " + std::to_string(s));
  }
}

}  // namespace
}  // namespace shard
