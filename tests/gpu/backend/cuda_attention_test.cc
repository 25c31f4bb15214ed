// Flash attention on CUDA against the CPU backend's attention (itself checked
// against a naive reference and finite differences in tests/unit/backend):
// forward output and log-sum-exp, and the backward dQ/dK/dV, for head dims
// 32/48/64/128 (48 exercises the zero padding to 64), GQA groups 1/2/4,
// sequence lengths that are not tile multiples, and packed segments.
//
// Tolerances: out and lse atol 2e-5 (+ rtol 1e-4); dqkv atol 1e-4 + rtol 1e-3
// (fp32 throughout; the kernels use __expf and a different summation order).
//
// Then compute bf16/fp16 (AttentionShape::compute): the tensor-core kernels
// (SHARDD_TC_ATTENTION=1) against the CPU backend in fp32, and the fp32
// fallback's rounding of q, k, v (tolerances with those tests below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "shard/tensor/dtype.h"
#include "tests/gpu/gpu_test_util.h"

namespace shard {
namespace {

using gpu_testing::Down;
using gpu_testing::ExpectClose;
using gpu_testing::Random;
using gpu_testing::Up;
using gpu_testing::UpInt;

struct Case {
  int64_t batch, seq;
  int heads, kv, hd;
  bool packed;
};

std::string Name(const Case& c) {
  return "b" + std::to_string(c.batch) + " T" + std::to_string(c.seq) + " H" + std::to_string(c.heads) + "/" +
         std::to_string(c.kv) + " hd" + std::to_string(c.hd) + (c.packed ? " packed" : "");
}

std::vector<int32_t> Segments(const Case& c, uint32_t seed) { return gpu_testing::PackedSegments(c.batch, c.seq, seed); }

struct Result {
  std::vector<float> out, lse, dqkv;
};

Result RunAttention(Backend* be, const Case& c, const std::vector<float>& qkv, const std::vector<int32_t>* seg,
                    const std::vector<float>& dout, DType compute = DType::kF32) {
  AttentionShape s{c.batch, c.seq, c.heads, c.kv, c.hd};
  s.compute = compute;
  const int64_t rows = c.batch * c.seq;
  DeviceBuffer dq = Up(be, qkv), o = Up(be, std::vector<float>(rows * s.out_stride()));
  DeviceBuffer lse = Up(be, std::vector<float>(rows * c.heads)), d = Up(be, dout);
  DeviceBuffer dqkv = Up(be, std::vector<float>(rows * s.qkv_stride(), 7.0f));  // must be overwritten
  DeviceBuffer sg;
  if (seg) sg = UpInt(be, *seg);
  const int32_t* sp = seg ? sg.as_int() : nullptr;
  be->AttentionForward(s, dq.data(), sp, o.data(), lse.data());
  be->AttentionBackward(s, dq.data(), sp, o.data(), lse.data(), d.data(), dqkv.data());
  return {Down(be, o), Down(be, lse), Down(be, dqkv)};
}

class CudaAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionTest, ForwardAndBackwardMatchCpu) {
  std::string why;
  auto gpu = gpu_testing::MaybeCuda(&why);
  SKIP_WITHOUT_GPU(gpu, why);
  auto cpu = CreateBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  const Case c = GetParam();
  AttentionShape s{c.batch, c.seq, c.heads, c.kv, c.hd};
  auto qkv = Random(c.batch * c.seq * s.qkv_stride(), 100 + c.hd, -1.5f, 1.5f);
  auto dout = Random(c.batch * c.seq * s.out_stride(), 200 + c.hd);
  std::vector<int32_t> seg;
  if (c.packed) seg = Segments(c, 300 + static_cast<uint32_t>(c.seq));
  const std::vector<int32_t>* sp = c.packed ? &seg : nullptr;
  Result g = RunAttention(gpu.get(), c, qkv, sp, dout);
  Result r = RunAttention(cpu->get(), c, qkv, sp, dout);
  const std::string n = Name(c);
  ExpectClose(g.out, r.out, 1e-4, 2e-5, "attention out " + n);
  ExpectClose(g.lse, r.lse, 1e-4, 2e-5, "attention lse " + n);
  ExpectClose(g.dqkv, r.dqkv, 1e-3, 1e-4, "attention dqkv " + n);
  // The backward has no atomics: the same inputs give the same bits.
  Result again = RunAttention(gpu.get(), c, qkv, sp, dout);
  EXPECT_EQ(0, std::memcmp(again.dqkv.data(), g.dqkv.data(), g.dqkv.size() * sizeof(float))) << n;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTest,
                         ::testing::Values(Case{2, 77, 4, 2, 32, false}, Case{2, 77, 4, 2, 32, true},
                                           Case{1, 130, 8, 2, 64, false}, Case{3, 200, 8, 4, 64, true},
                                           Case{2, 70, 4, 4, 128, false}, Case{1, 150, 8, 2, 128, true},
                                           Case{2, 65, 6, 3, 48, true}, Case{1, 1024, 8, 2, 64, false},
                                           Case{2, 1, 4, 1, 64, false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string n = Name(info.param);
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// ---- compute bf16/fp16 ------------------------------------------------------------
// The tensor-core kernels (cuda_attention_tc_{fwd,bwd}.cu, SHARDD_TC_ATTENTION=1) round
// q, k, v, dout, P and dS to the compute type and accumulate in fp32. The
// reference is the CPU backend in fp32 on the same inputs. Most cases first
// round the inputs on the host ("prerounded"), so the kernels' rounding of q,
// k, v and dout changes nothing and the comparison isolates their own work:
// rounded P and dS, fp32 accumulation order. Others feed unrounded inputs.
// Errors are measured against the largest magnitude of each output (out, dQ,
// dK, dV separately); lse absolutely:
//                      out     dQ/dK/dV   lse
//   bf16 prerounded    1e-2    2e-2       1e-3
//   bf16 unrounded     2e-2    3e-2       2e-2
//   fp16 prerounded    2e-3    5e-3       1e-3
//   fp16 unrounded     4e-3    1e-2       3e-3
// (unit roundoff 2^-9 for bf16, 2^-11 for fp16; a numpy model of the kernels'
// rounding gave at most 3e-3 prerounded / 7e-3 unrounded in bf16 and 7e-4 in
// fp16, lse 6e-3 unrounded in bf16; a wrong mask, tile edge or index gives
// errors of order 1.)

// Sets (value) or unsets (null) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) had_ = true, old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// A CUDA backend created with SHARDD_TC_ATTENTION=tc (or unset for null).
std::unique_ptr<Backend> CudaWithTc(const char* tc, std::string* why) {
  ScopedEnv env("SHARDD_TC_ATTENTION", tc);
  return gpu_testing::MaybeCuda(why);
}

void RoundTo(DType t, std::vector<float>* v) {
  std::vector<uint16_t> two(v->size());
  ConvertFromF32(t, v->data(), two.data(), v->size());
  ConvertToF32(t, two.data(), v->data(), v->size());
}

// Columns [c0, c1) of every row of a matrix with `stride` columns.
std::vector<float> Cols(const std::vector<float>& m, int64_t stride, int64_t c0, int64_t c1) {
  std::vector<float> out;
  const int64_t rows = static_cast<int64_t>(m.size()) / stride;
  for (int64_t r = 0; r < rows; ++r) out.insert(out.end(), m.begin() + r * stride + c0, m.begin() + r * stride + c1);
  return out;
}

// |gpu - cpu| <= frac * max(max |cpu|, 1e-3) everywhere. The floor covers
// outputs that are zero up to rounding noise on both sides (seq 1: dQ, dK).
void ExpectCloseToMax(const std::vector<float>& gpu, const std::vector<float>& cpu, double frac,
                      const std::string& what) {
  double mx = 1e-3;
  for (float v : cpu) mx = std::max(mx, std::fabs(static_cast<double>(v)));
  gpu_testing::ExpectClose(gpu, cpu, 0.0, frac * mx, what);
}

struct TcCase {
  Case shape;
  DType compute;
  bool prerounded;  // q, k, v and dout already representable in `compute`
};

std::string TcName(const TcCase& t) {
  return Name(t.shape) + " " + DTypeName(t.compute) + (t.prerounded ? " prerounded" : " unrounded");
}

struct TcTol {
  double out, grad, lse;
};
TcTol TolFor(const TcCase& t) {
  if (t.compute == DType::kBF16) return t.prerounded ? TcTol{1e-2, 2e-2, 1e-3} : TcTol{2e-2, 3e-2, 2e-2};
  return t.prerounded ? TcTol{2e-3, 5e-3, 1e-3} : TcTol{4e-3, 1e-2, 3e-3};
}

class CudaAttentionTcTest : public ::testing::TestWithParam<TcCase> {};

TEST_P(CudaAttentionTcTest, TensorCoresMatchCpuFp32) {
  const TcCase t = GetParam();
  const Case& c = t.shape;
  std::string why;
  auto gpu = CudaWithTc("1", &why);
  SKIP_WITHOUT_GPU(gpu, why);
  if (t.compute == DType::kBF16 && !gpu->native_bf16())
    GTEST_SKIP() << "bf16 tensor cores need compute capability 8.0";
  auto fallback = CudaWithTc(nullptr, &why);
  ASSERT_TRUE(fallback) << why;
  auto cpu = CreateBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  AttentionShape s{c.batch, c.seq, c.heads, c.kv, c.hd};
  auto qkv = Random(c.batch * c.seq * s.qkv_stride(), 100 + c.hd, -1.5f, 1.5f);
  auto dout = Random(c.batch * c.seq * s.out_stride(), 200 + c.hd);
  if (t.prerounded) {
    RoundTo(t.compute, &qkv);
    RoundTo(t.compute, &dout);
  }
  std::vector<int32_t> seg;
  if (c.packed) seg = Segments(c, 300 + static_cast<uint32_t>(c.seq));
  const std::vector<int32_t>* sp = c.packed ? &seg : nullptr;
  Result g = RunAttention(gpu.get(), c, qkv, sp, dout, t.compute);
  Result r = RunAttention(cpu->get(), c, qkv, sp, dout);
  const TcTol tol = TolFor(t);
  const std::string n = TcName(t);
  ExpectCloseToMax(g.out, r.out, tol.out, "tc out " + n);
  ExpectClose(g.lse, r.lse, 0.0, tol.lse, "tc lse " + n);
  const int64_t q_end = int64_t{c.heads} * c.hd, k_end = q_end + int64_t{c.kv} * c.hd;
  ExpectCloseToMax(Cols(g.dqkv, s.qkv_stride(), 0, q_end), Cols(r.dqkv, s.qkv_stride(), 0, q_end), tol.grad,
                   "tc dQ " + n);
  ExpectCloseToMax(Cols(g.dqkv, s.qkv_stride(), q_end, k_end), Cols(r.dqkv, s.qkv_stride(), q_end, k_end),
                   tol.grad, "tc dK " + n);
  ExpectCloseToMax(Cols(g.dqkv, s.qkv_stride(), k_end, s.qkv_stride()),
                   Cols(r.dqkv, s.qkv_stride(), k_end, s.qkv_stride()), tol.grad, "tc dV " + n);
  // No atomics: the same inputs give the same bits.
  Result again = RunAttention(gpu.get(), c, qkv, sp, dout, t.compute);
  EXPECT_EQ(0, std::memcmp(again.out.data(), g.out.data(), g.out.size() * sizeof(float))) << n;
  EXPECT_EQ(0, std::memcmp(again.dqkv.data(), g.dqkv.data(), g.dqkv.size() * sizeof(float))) << n;
  // The tensor cores really ran: they round P, the fp32 fallback (the same
  // device without SHARDD_TC_ATTENTION) does not, so the bits differ.
  if (c.seq >= 16) {
    Result f = RunAttention(fallback.get(), c, qkv, sp, dout, t.compute);
    EXPECT_NE(0, std::memcmp(f.out.data(), g.out.data(), g.out.size() * sizeof(float)))
        << n << ": SHARDD_TC_ATTENTION=1 gave the fp32 fallback's output; the tensor-core kernels did not run";
  }
}

constexpr DType kBF = DType::kBF16, kFP = DType::kF16;
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionTcTest,
    ::testing::Values(TcCase{{2, 200, 8, 2, 64, false}, kBF, true}, TcCase{{1, 200, 8, 2, 128, true}, kBF, true},
                      TcCase{{3, 200, 8, 4, 64, true}, kBF, true}, TcCase{{2, 70, 4, 4, 128, false}, kBF, true},
                      TcCase{{2, 77, 4, 2, 32, false}, kBF, true}, TcCase{{2, 65, 6, 3, 48, true}, kBF, true},
                      TcCase{{1, 1024, 8, 2, 64, false}, kBF, true}, TcCase{{2, 1, 4, 1, 64, false}, kBF, true},
                      TcCase{{1, 200, 8, 2, 64, true}, kBF, false}, TcCase{{1, 130, 8, 2, 128, false}, kBF, false},
                      TcCase{{2, 200, 8, 2, 64, false}, kFP, true}, TcCase{{1, 150, 8, 2, 128, true}, kFP, true},
                      TcCase{{2, 77, 4, 2, 32, true}, kFP, true}, TcCase{{1, 200, 8, 2, 128, false}, kFP, false}),
    [](const ::testing::TestParamInfo<TcCase>& info) {
      std::string n = TcName(info.param);
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

// Without SHARDD_TC_ATTENTION (or for shapes the tensor cores do not take),
// compute bf16/fp16 runs the fp32 kernels on q, k, v rounded on the device:
// the same bits as compute fp32 on inputs rounded on the host (both round to
// nearest even).
TEST(CudaAttentionFallbackTest, RoundsQkvToTheComputeType) {
  std::string why;
  auto gpu = CudaWithTc(nullptr, &why);
  SKIP_WITHOUT_GPU(gpu, why);
  const Case c{2, 77, 4, 2, 32, true};
  AttentionShape s{c.batch, c.seq, c.heads, c.kv, c.hd};
  const auto qkv = Random(c.batch * c.seq * s.qkv_stride(), 7, -1.5f, 1.5f);
  const auto dout = Random(c.batch * c.seq * s.out_stride(), 8);
  const auto seg = Segments(c, 9);
  for (DType t : {DType::kBF16, DType::kF16}) {
    auto rounded = qkv;
    RoundTo(t, &rounded);
    Result a = RunAttention(gpu.get(), c, qkv, &seg, dout, t);
    Result b = RunAttention(gpu.get(), c, rounded, &seg, dout);
    EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float))) << DTypeName(t);
    EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float))) << DTypeName(t);
    EXPECT_EQ(0, std::memcmp(a.dqkv.data(), b.dqkv.data(), a.dqkv.size() * sizeof(float))) << DTypeName(t);
  }
}

}  // namespace
}  // namespace shard
