// CPU backend: RMSNorm, RoPE and SwiGLU against the double reference, with
// backward passes checked by finite differences of the reference.
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
using testing::Dot;
using testing::ExpectAllNear;
using testing::ExpectGradientMatches;
using testing::RandomFloats;
using testing::ToDouble;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class CpuNormTest : public BackendTest {};

TEST_F(CpuNormTest, RmsNormForwardOddDim) {
  const int64_t rows = 5;
  const int dim = 37;
  const float eps = 1e-5f;
  std::vector<float> x = RandomFloats(rows * dim, 1, -2.0f, 2.0f);
  for (int j = 0; j < dim; ++j) x[3 * dim + j] *= 1e-3f;  // a row where eps matters
  const std::vector<float> w = RandomFloats(dim, 2, 0.5f, 1.5f);
  DeviceBuffer dx = Up(x), dw = Up(w), dy = Filled(rows * dim, kNaN), dr = Filled(rows, kNaN);
  be_->RmsNormForward(dx.data(), dw.data(), rows, dim, eps, dy.data(), dr.data());
  std::vector<double> y(rows * dim), rstd(rows);
  const std::vector<double> xd = ToDouble(x), wd = ToDouble(w);
  ref::RmsNorm(xd.data(), wd.data(), rows, dim, eps, y.data(), rstd.data());
  ExpectAllNear(Down(dy), y, 1e-5, 1e-7, "y");
  ExpectAllNear(Down(dr), rstd, 1e-5, 0.0, "rstd");
}

class CpuNormBackwardTest : public BackendTest {
 protected:
  void Check(int64_t rows, int dim, uint32_t seed) {
    const float eps = 1e-5f;
    const std::vector<float> x = RandomFloats(rows * dim, seed, -2.0f, 2.0f);
    const std::vector<float> w = RandomFloats(dim, seed + 1, 0.5f, 1.5f);
    const std::vector<float> dy = RandomFloats(rows * dim, seed + 2);
    const std::vector<float> dw_prior = RandomFloats(dim, seed + 3);
    // Forward on the backend for rstd, then backward: dx overwritten, dw accumulates.
    DeviceBuffer bx = Up(x), bw = Up(w), bdy = Up(dy), by = Filled(rows * dim, 0.0f);
    DeviceBuffer brstd = Filled(rows, 0.0f), bdx = Filled(rows * dim, kNaN), bdw = Up(dw_prior);
    be_->RmsNormForward(bx.data(), bw.data(), rows, dim, eps, by.data(), brstd.data());
    be_->RmsNormBackward(bdy.data(), bx.data(), bw.data(), brstd.data(), rows, dim, bdx.data(),
                         bdw.data());
    std::vector<float> dw = Down(bdw);
    for (int j = 0; j < dim; ++j) dw[j] -= dw_prior[j];
    const std::vector<double> xd = ToDouble(x), wd = ToDouble(w), dyd = ToDouble(dy);
    ExpectGradientMatches(
        Down(bdx), xd,
        [&](const std::vector<double>& xv) {
          std::vector<double> out(rows * dim);
          ref::RmsNorm(xv.data(), wd.data(), rows, dim, eps, out.data(), nullptr);
          return Dot(out, dyd);
        },
        "rmsnorm dx");
    ExpectGradientMatches(
        dw, wd,
        [&](const std::vector<double>& wv) {
          std::vector<double> out(rows * dim);
          ref::RmsNorm(xd.data(), wv.data(), rows, dim, eps, out.data(), nullptr);
          return Dot(out, dyd);
        },
        "rmsnorm dw");
  }
};

TEST_F(CpuNormBackwardTest, OddDim) { Check(5, 37, 10); }

// Enough rows for several dw chunks and ParallelFor tasks.
TEST_F(CpuNormBackwardTest, ManyRows) { Check(300, 24, 20); }

// cos/sin table [max_pos, hd]: cos(p * theta^(-2i/hd)) then sin, as HF builds it.
std::vector<float> RopeTable(int max_pos, int hd, double theta = 10000.0) {
  std::vector<float> t(static_cast<size_t>(max_pos) * hd);
  for (int p = 0; p < max_pos; ++p)
    for (int i = 0; i < hd / 2; ++i) {
      const double ang = p * std::pow(theta, -2.0 * i / hd);
      t[p * hd + i] = static_cast<float>(std::cos(ang));
      t[p * hd + hd / 2 + i] = static_cast<float>(std::sin(ang));
    }
  return t;
}

class CpuRopeTest : public BackendTest, public ::testing::WithParamInterface<int> {};

// Heads sit inside wider rows (like q inside fused qkv): the extra columns
// must not change; forward and inverse match the reference and undo each other.
TEST_P(CpuRopeTest, ForwardInverseAndBackward) {
  const int hd = GetParam(), n_heads = 3, max_pos = 16;
  const int64_t rows = 6, stride = n_heads * hd + 5;
  const std::vector<int32_t> pos = {3, 0, 15, 7, 7, 1};
  const std::vector<float> table = RopeTable(max_pos, hd);
  const std::vector<float> x = RandomFloats(rows * stride, 30 + hd);
  const std::vector<double> tabled = ToDouble(table);
  DeviceBuffer bpos = UpInt(pos), btable = Up(table);
  auto rope = [&](const std::vector<float>& in, bool inverse) {
    DeviceBuffer buf = Up(in);
    be_->Rope(buf.data(), rows, stride, n_heads, hd, bpos.as_int(), btable.data(), inverse);
    return Down(buf);
  };
  for (bool inverse : {false, true}) {
    const std::vector<float> y = rope(x, inverse);
    std::vector<double> want = ToDouble(x);
    ref::Rope(want.data(), rows, stride, n_heads, hd, pos.data(), tabled.data(), inverse);
    ExpectAllNear(y, want, 1e-6, 1e-6, inverse ? "rope inverse" : "rope forward");
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = n_heads * hd; j < stride; ++j) ASSERT_EQ(y[r * stride + j], x[r * stride + j]);
  }
  ExpectAllNear(rope(rope(x, false), true), ToDouble(x), 0.0, 1e-6, "inverse(forward(x))");
  // Backward: d/dx sum(dy * rope(x)) is the inverse rotation of dy.
  const std::vector<float> dy = RandomFloats(rows * stride, 40 + hd);
  const std::vector<double> dyd = ToDouble(dy);
  ExpectGradientMatches(
      rope(dy, true), ToDouble(x),
      [&](const std::vector<double>& xv) {
        std::vector<double> out = xv;
        ref::Rope(out.data(), rows, stride, n_heads, hd, pos.data(), tabled.data(), false);
        return Dot(out, dyd);
      },
      "rope");
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CpuRopeTest, ::testing::Values(8, 16));

class CpuSwiGluTest : public BackendTest {};

std::vector<float> SwiGluInputs(int64_t rows, int ffn, uint32_t seed) {
  std::vector<float> gu = RandomFloats(rows * 2 * ffn, seed, -4.0f, 4.0f);
  // Saturated gates: exp must neither overflow nor lose the sign.
  gu[0] = 40.0f;
  gu[1] = -40.0f;
  gu[2] = 100.0f;
  gu[3] = -100.0f;
  return gu;
}

TEST_F(CpuSwiGluTest, Forward) {
  const int64_t rows = 7;
  const int ffn = 45;
  const std::vector<float> gu = SwiGluInputs(rows, ffn, 50);
  DeviceBuffer bgu = Up(gu), bh = Filled(rows * ffn, kNaN);
  be_->SwiGluForward(bgu.data(), rows, ffn, bh.data());
  std::vector<double> want(rows * ffn);
  const std::vector<double> gud = ToDouble(gu);
  ref::SwiGlu(gud.data(), rows, ffn, want.data());
  ExpectAllNear(Down(bh), want, 1e-5, 1e-7, "swiglu");
}

TEST_F(CpuSwiGluTest, NaNPropagates) {
  std::vector<float> gu = SwiGluInputs(1, 16, 55);
  gu[5] = kNaN;
  DeviceBuffer bgu = Up(gu), bh = Filled(16, 0.0f), bdh = Filled(16, 1.0f), bdgu = Filled(32, 0.0f);
  be_->SwiGluForward(bgu.data(), 1, 16, bh.data());
  be_->SwiGluBackward(bdh.data(), bgu.data(), 1, 16, bdgu.data());
  EXPECT_TRUE(std::isnan(Down(bh)[5]));
  EXPECT_TRUE(std::isnan(Down(bdgu)[5]));
  EXPECT_FALSE(std::isnan(Down(bh)[4]));
}

TEST_F(CpuSwiGluTest, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 5;
  const int ffn = 19;
  const std::vector<float> gu = SwiGluInputs(rows, ffn, 60);
  const std::vector<float> dh = RandomFloats(rows * ffn, 61);
  DeviceBuffer bgu = Up(gu), bdh = Up(dh), bdgu = Filled(rows * 2 * ffn, kNaN);
  be_->SwiGluBackward(bdh.data(), bgu.data(), rows, ffn, bdgu.data());
  const std::vector<double> dhd = ToDouble(dh);
  ExpectGradientMatches(
      Down(bdgu), ToDouble(gu),
      [&](const std::vector<double>& g) {
        std::vector<double> h(rows * ffn);
        ref::SwiGlu(g.data(), rows, ffn, h.data());
        return Dot(h, dhd);
      },
      "swiglu");
}

// Benchmark-sized rows (several ParallelFor chunks) against the closed forms.
TEST_F(CpuSwiGluTest, LargeRowsMatchReference) {
  const int64_t rows = 64;
  const int ffn = 688;
  const std::vector<float> gu = SwiGluInputs(rows, ffn, 70);
  const std::vector<float> dh = RandomFloats(rows * ffn, 71);
  DeviceBuffer bgu = Up(gu), bdh = Up(dh), bh = Filled(rows * ffn, kNaN);
  DeviceBuffer bdgu = Filled(rows * 2 * ffn, kNaN);
  be_->SwiGluForward(bgu.data(), rows, ffn, bh.data());
  be_->SwiGluBackward(bdh.data(), bgu.data(), rows, ffn, bdgu.data());
  std::vector<double> want(rows * ffn), want_grad(rows * 2 * ffn);
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < ffn; ++j) {
      const double g = gu[r * 2 * ffn + j], u = gu[r * 2 * ffn + ffn + j], d = dh[r * ffn + j];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      want[r * ffn + j] = g * sig * u;
      want_grad[r * 2 * ffn + j] = d * u * sig * (1.0 + g * (1.0 - sig));
      want_grad[r * 2 * ffn + ffn + j] = d * g * sig;
    }
  ExpectAllNear(Down(bh), want, 1e-5, 1e-7, "swiglu forward");
  ExpectAllNear(Down(bdgu), want_grad, 1e-5, 1e-7, "swiglu backward");
}

}  // namespace
}  // namespace shard
