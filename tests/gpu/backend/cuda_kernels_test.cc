// The CUDA backend's GEMM, elementwise, norm, RoPE, SwiGLU, embedding,
// cross-entropy and AdamW kernels against the CPU backend (the numerical
// reference) on random inputs.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|):
//   fp32 GEMM            rtol 1e-5, atol 1e-5 * sqrt(k)   (summation order only)
//   TF32 GEMM            rtol 5e-3, atol 5e-3 * sqrt(k)   (10-bit mantissa products)
//   bf16/fp16-input GEMM rtol 1e-4, atol 1e-4 * sqrt(k)   (both sides multiply the same
//                                                          rounded inputs exactly; fp32
//                                                          accumulation in another order)
//   elementwise / norms  rtol 1e-5, atol 1e-6             (expf vs the CPU's FastExp, FMA contraction)
//   reductions (double)  relative 1e-12
//   embedding forward    exact; backward rtol 1e-6 (the same row order)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "shard/tensor/dtype.h"
#include "tests/gpu/gpu_test_util.h"

namespace shard {
namespace {

using gpu_testing::Down;
using gpu_testing::ExpectClose;
using gpu_testing::Random;
using gpu_testing::Up;
using gpu_testing::UpInt;

using CudaKernelsTest = gpu_testing::GpuVsCpuTest;

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // extra leading-dimension columns
  int64_t offset;  // floats from the allocation's start (misaligned operands)
};

void RunGemm(Backend* be, const GemmCase& c, const std::vector<float>& a, const std::vector<float>& b,
             const std::vector<float>& c0, std::vector<float>* out, DType compute = DType::kF32) {
  const int64_t lda = (c.ta ? c.m : c.k) + c.pad, ldb = (c.tb ? c.k : c.n) + c.pad, ldc = c.n + c.pad;
  DeviceBuffer da = gpu_testing::Up(be, a), db = gpu_testing::Up(be, b), dc = gpu_testing::Up(be, c0);
  GemmArgs g;
  g.trans_a = c.ta, g.trans_b = c.tb, g.m = c.m, g.n = c.n, g.k = c.k, g.alpha = c.alpha, g.beta = c.beta;
  g.a = da.data() + c.offset, g.lda = lda, g.b = db.data() + c.offset, g.ldb = ldb;
  g.c = dc.data() + c.offset, g.ldc = ldc;
  g.compute = compute;
  be->Gemm(g);
  *out = gpu_testing::Down(be, dc);
}

void CheckGemms(Backend* gpu, Backend* cpu, double rtol, double atol_per_sqrt_k, const std::string& mode,
                DType compute = DType::kF32) {
  const GemmCase cases[] = {
      {false, false, 37, 53, 71, 1.0f, 0.0f, 0, 0},  {false, true, 64, 96, 128, 1.0f, 1.0f, 0, 0},
      {true, false, 33, 17, 200, 0.5f, 1.0f, 3, 1},  {true, true, 5, 300, 9, 1.0f, 0.0f, 1, 3},
      {false, true, 512, 384, 256, 1.0f, 0.0f, 0, 0}, {false, false, 8, 8, 0, 1.0f, 0.5f, 0, 0},
  };
  int idx = 0;
  for (const GemmCase& c : cases) {
    const int64_t lda = (c.ta ? c.m : c.k) + c.pad, ldb = (c.tb ? c.k : c.n) + c.pad, ldc = c.n + c.pad;
    const int64_t a_rows = c.ta ? c.k : c.m, b_rows = c.tb ? c.n : c.k;
    auto a = Random(static_cast<size_t>(a_rows * lda + c.offset + 1), 10 + idx);
    auto b = Random(static_cast<size_t>(b_rows * ldb + c.offset + 1), 20 + idx);
    auto c0 = Random(static_cast<size_t>(c.m * ldc + c.offset + 1), 30 + idx);
    std::vector<float> got, want;
    RunGemm(gpu, c, a, b, c0, &got, compute);
    RunGemm(cpu, c, a, b, c0, &want, compute);
    ExpectClose(got, want, rtol, atol_per_sqrt_k * std::sqrt(static_cast<double>(std::max<int64_t>(c.k, 1))),
                mode + " gemm case " + std::to_string(idx));
    ++idx;
  }
}

TEST_F(CudaKernelsTest, GemmFp32MatchesCpu) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  CheckGemms(gpu_.get(), cpu_.get(), 1e-5, 1e-5, "fp32");
}

TEST_F(CudaKernelsTest, GemmTf32MatchesCpuWithinTf32Rounding) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  auto tf32 = gpu_testing::MaybeCuda(&why_, /*tf32=*/true);
  ASSERT_TRUE(tf32);
  CheckGemms(tf32.get(), cpu_.get(), 5e-3, 5e-3, "tf32");
}

// GemmArgs::compute bf16/fp16: the GPU casts A and B to two bytes for the
// tensor cores (bf16 before sm_80: rounded, then fp32 math), the CPU rounds
// them the same way, so only the summation order differs. The TF32 backend is
// used on purpose: two-byte inputs must not fall back to TF32 products.
TEST_F(CudaKernelsTest, GemmTwoByteInputsMatchCpuOnTheSameRoundedInputs) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  auto tf32 = gpu_testing::MaybeCuda(&why_, /*tf32=*/true);
  ASSERT_TRUE(tf32);
  CheckGemms(tf32.get(), cpu_.get(), 1e-4, 1e-4, "bf16-input", DType::kBF16);
  CheckGemms(tf32.get(), cpu_.get(), 1e-4, 1e-4, "fp16-input", DType::kF16);
}

// x rounded to `t` and stored as two-byte values behind a float* (a two-byte
// compute copy: GemmArgs::b_dtype, EmbeddingForward's table_dtype).
DeviceBuffer UpTwoByte(Backend* be, const std::vector<float>& x, DType t) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = t == DType::kBF16 ? F32ToBF16(x[i]) : F32ToF16(x[i]);
  auto d = DeviceBuffer::Create(be, static_cast<int64_t>((bits.size() + 1) / 2));
  EXPECT_TRUE(d.ok());
  be->CopyToDevice(d->data(), bits.data(), bits.size() * sizeof(uint16_t));
  return std::move(*d);
}

// A B stored in the compute type goes to cuBLASLt as it is (no cast); with
// fp32 compute it is widened. Both against the CPU backend on the same stored B.
TEST_F(CudaKernelsTest, GemmStoredTwoByteBMatchesCpu) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  const GemmCase cases[] = {{false, true, 64, 96, 128, 1.0f, 0.0f, 0, 0}, {false, false, 37, 53, 71, 1.0f, 1.0f, 0, 0},
                            {true, false, 33, 17, 200, 0.5f, 1.0f, 3, 0}, {false, true, 512, 384, 256, 1.0f, 0.0f, 0, 0}};
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (DType compute : {dt, DType::kF32}) {
      int idx = 0;
      for (const GemmCase& c : cases) {
        const int64_t lda = (c.ta ? c.m : c.k) + c.pad, ldb = (c.tb ? c.k : c.n) + c.pad, ldc = c.n + c.pad;
        auto a = Random(static_cast<size_t>((c.ta ? c.k : c.m) * lda), 60 + idx);
        auto b = Random(static_cast<size_t>((c.tb ? c.n : c.k) * ldb), 70 + idx);
        auto c0 = Random(static_cast<size_t>(c.m * ldc), 80 + idx);
        std::vector<float> out[2];
        Backend* bes[2] = {gpu_.get(), cpu_.get()};
        for (int k = 0; k < 2; ++k) {
          DeviceBuffer da = Up(bes[k], a), db = UpTwoByte(bes[k], b, dt), dc = Up(bes[k], c0);
          GemmArgs g;
          g.trans_a = c.ta, g.trans_b = c.tb, g.m = c.m, g.n = c.n, g.k = c.k, g.alpha = c.alpha, g.beta = c.beta;
          g.a = da.data(), g.lda = lda, g.b = db.data(), g.ldb = ldb, g.b_dtype = dt;
          g.c = dc.data(), g.ldc = ldc;
          g.compute = compute;
          bes[k]->Gemm(g);
          out[k] = Down(bes[k], dc);
        }
        const double tol = compute == DType::kF32 ? 1e-5 : 1e-4;
        ExpectClose(out[0], out[1], tol, tol * std::sqrt(static_cast<double>(c.k)),
                    std::string("stored ") + DTypeName(dt) + " B, compute " + DTypeName(compute) + ", case " +
                        std::to_string(idx));
        ++idx;
      }
    }
  }
}

TEST_F(CudaKernelsTest, EmbeddingForwardOfATwoByteTableIsExact) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  const int vocab = 300, dim = 200;
  const int64_t rows = 2000;
  std::vector<int32_t> tokens(rows);
  std::mt19937 rng(5);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  auto table = Random(vocab * dim, 7, -4.0f, 4.0f);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    std::vector<float> out[2];
    Backend* bes[2] = {gpu_.get(), cpu_.get()};
    for (int k = 0; k < 2; ++k) {
      DeviceBuffer tk = UpInt(bes[k], tokens), tb = UpTwoByte(bes[k], table, dt);
      DeviceBuffer o = Up(bes[k], std::vector<float>(rows * dim));
      bes[k]->EmbeddingForward(tk.as_int(), rows, tb.data(), dt, dim, o.data());
      out[k] = Down(bes[k], o);
    }
    ExpectClose(out[0], out[1], 0, 0, std::string("embedding of a ") + DTypeName(dt) + " table (exact)");
  }
}

// LoRA dropout: the mask is DropoutKeep on both sides, the scale the same
// float: bitwise the CPU backend, in place too.
TEST_F(CudaKernelsTest, DropoutIsBitwiseTheCpu) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  const int64_t n = 1000003;
  auto x = Random(n, 9);
  for (float p : {0.05f, 0.1f, 0.5f}) {
    std::vector<float> out[2];
    Backend* bes[2] = {gpu_.get(), cpu_.get()};
    for (int k = 0; k < 2; ++k) {
      DeviceBuffer d = Up(bes[k], x);
      bes[k]->Dropout(d.data(), d.data(), n, p, 1234567u);
      out[k] = Down(bes[k], d);
    }
    ExpectClose(out[0], out[1], 0, 0, "dropout p=" + std::to_string(p) + " (exact)");
    int64_t dropped = 0;
    for (float v : out[0]) dropped += v == 0.0f;
    EXPECT_NEAR(static_cast<double>(dropped) / n, p, 0.01) << p;
  }
}

TEST_F(CudaKernelsTest, ElementwiseAndReductions) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  const int64_t n = 1000003;
  auto a = Random(n, 1), b = Random(n, 2);
  for (Backend* be : {gpu_.get()}) {
    DeviceBuffer da = Up(be, a), db = Up(be, b);
    be->Add(da.data(), db.data(), da.data(), n);
    be->Scale(da.data(), n, 0.5f);
    auto got = Down(be, da);
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = (a[i] + b[i]) * 0.5f;
    ExpectClose(got, want, 0, 0, "add+scale (exact)");
    be->Fill(db.data(), n, 3.0f);
    auto f = Down(be, db);
    EXPECT_TRUE(std::all_of(f.begin(), f.end(), [](float x) { return x == 3.0f; }));
  }
  DeviceBuffer g = Up(gpu_.get(), a), c = Up(cpu_.get(), a);
  const double sg = gpu_->SumSquares(g.data(), n), sc = cpu_->SumSquares(c.data(), n);
  EXPECT_NEAR(sg, sc, 1e-12 * sc);
  EXPECT_EQ(gpu_->SumSquares(g.data(), n), sg) << "SumSquares must be deterministic";
  EXPECT_EQ(gpu_->SumSquares(g.data(), 0), 0.0);
  EXPECT_NEAR(gpu_->SumSquares(g.data() + 5, 7), cpu_->SumSquares(c.data() + 5, 7), 1e-12);
}

TEST_F(CudaKernelsTest, EmbeddingForwardAndBackward) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  const int vocab = 300, dim = 200;
  const int64_t rows = 5000;  // many repeats per token
  std::vector<int32_t> tokens(rows);
  std::mt19937 rng(3);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  auto table = Random(vocab * dim, 4), dout = Random(rows * dim, 5), dtable0 = Random(vocab * dim, 6);
  std::vector<float> out[2], dt[2];
  Backend* bes[2] = {gpu_.get(), cpu_.get()};
  for (int k = 0; k < 2; ++k) {
    Backend* be = bes[k];
    DeviceBuffer tk = UpInt(be, tokens), tb = Up(be, table), o = Up(be, std::vector<float>(rows * dim));
    DeviceBuffer d = Up(be, dout), g = Up(be, dtable0);
    be->EmbeddingForward(tk.as_int(), rows, tb.data(), DType::kF32, dim, o.data());
    be->EmbeddingBackward(tk.as_int(), rows, d.data(), dim, g.data());
    out[k] = Down(be, o);
    dt[k] = Down(be, g);
  }
  ExpectClose(out[0], out[1], 0, 0, "embedding forward (exact)");
  ExpectClose(dt[0], dt[1], 1e-6, 1e-6, "embedding backward");
}

TEST_F(CudaKernelsTest, RmsNormForwardAndBackward) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  for (int dim : {64, 1000, 4096}) {
    const int64_t rows = 333;
    auto x = Random(rows * dim, 7, -2, 2), w = Random(dim, 8, 0.5f, 1.5f), dy = Random(rows * dim, 9);
    auto dw0 = Random(dim, 10);
    std::vector<float> y[2], rs[2], dx[2], dw[2];
    Backend* bes[2] = {gpu_.get(), cpu_.get()};
    for (int k = 0; k < 2; ++k) {
      Backend* be = bes[k];
      DeviceBuffer dX = Up(be, x), dW = Up(be, w), dY = Up(be, std::vector<float>(rows * dim));
      DeviceBuffer dR = Up(be, std::vector<float>(rows)), dDy = Up(be, dy), dDx = Up(be, std::vector<float>(rows * dim));
      DeviceBuffer dDw = Up(be, dw0);
      be->RmsNormForward(dX.data(), dW.data(), rows, dim, 1e-5f, dY.data(), dR.data());
      be->RmsNormBackward(dDy.data(), dX.data(), dW.data(), dR.data(), rows, dim, dDx.data(), dDw.data());
      y[k] = Down(be, dY), rs[k] = Down(be, dR), dx[k] = Down(be, dDx), dw[k] = Down(be, dDw);
    }
    const std::string d = " dim " + std::to_string(dim);
    ExpectClose(y[0], y[1], 1e-5, 1e-6, "rmsnorm y" + d);
    ExpectClose(rs[0], rs[1], 2e-6, 0, "rmsnorm rstd" + d);
    ExpectClose(dx[0], dx[1], 1e-5, 1e-6, "rmsnorm dx" + d);
    ExpectClose(dw[0], dw[1], 1e-5, 1e-5, "rmsnorm dw (accumulated)" + d);
  }
}

TEST_F(CudaKernelsTest, RopeForwardAndInverse) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  const int64_t rows = 257;
  const int heads = 6, hd = 64, stride = heads * hd + 40;
  const int max_pos = 512;
  std::vector<float> table(max_pos * hd);
  for (int p = 0; p < max_pos; ++p)
    for (int i = 0; i < hd / 2; ++i) {
      const double ang = p * std::pow(10000.0, -2.0 * i / hd);
      table[p * hd + i] = static_cast<float>(std::cos(ang));
      table[p * hd + hd / 2 + i] = static_cast<float>(std::sin(ang));
    }
  std::vector<int32_t> pos(rows);
  for (int64_t r = 0; r < rows; ++r) pos[r] = static_cast<int32_t>((r * 7) % max_pos);
  auto x = Random(rows * stride, 11);
  for (bool inverse : {false, true}) {
    std::vector<float> got[2];
    Backend* bes[2] = {gpu_.get(), cpu_.get()};
    for (int k = 0; k < 2; ++k) {
      DeviceBuffer dx = Up(bes[k], x), dt = Up(bes[k], table), dp = UpInt(bes[k], pos);
      bes[k]->Rope(dx.data(), rows, stride, heads, hd, dp.as_int(), dt.data(), inverse);
      got[k] = Down(bes[k], dx);
    }
    ExpectClose(got[0], got[1], 1e-6, 1e-6, inverse ? "rope inverse" : "rope");
  }
}

TEST_F(CudaKernelsTest, SwiGluForwardAndBackward) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  const int64_t rows = 129;
  const int ffn = 700;
  auto gu = Random(rows * 2 * ffn, 12, -6, 6), dh = Random(rows * ffn, 13);
  std::vector<float> h[2], dgu[2];
  Backend* bes[2] = {gpu_.get(), cpu_.get()};
  for (int k = 0; k < 2; ++k) {
    DeviceBuffer g = Up(bes[k], gu), d = Up(bes[k], dh);
    DeviceBuffer o = Up(bes[k], std::vector<float>(rows * ffn)), dg = Up(bes[k], std::vector<float>(rows * 2 * ffn));
    bes[k]->SwiGluForward(g.data(), rows, ffn, o.data());
    bes[k]->SwiGluBackward(d.data(), g.data(), rows, ffn, dg.data());
    h[k] = Down(bes[k], o), dgu[k] = Down(bes[k], dg);
  }
  ExpectClose(h[0], h[1], 1e-5, 1e-6, "swiglu h");
  ExpectClose(dgu[0], dgu[1], 1e-5, 1e-6, "swiglu dgu");
}

TEST_F(CudaKernelsTest, CrossEntropyLossAndGradient) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  for (int vocab : {17, 512, 50257}) {
    const int64_t rows = 67;
    auto logits = Random(rows * static_cast<int64_t>(vocab), 14, -8, 8);
    std::vector<int32_t> targets(rows);
    std::mt19937 rng(15);
    for (auto& t : targets) t = rng() % 5 == 0 ? -1 : static_cast<int32_t>(rng() % vocab);
    double loss[2], eval[2];
    std::vector<float> grad[2], untouched[2];
    Backend* bes[2] = {gpu_.get(), cpu_.get()};
    for (int k = 0; k < 2; ++k) {
      DeviceBuffer l = Up(bes[k], logits), t = UpInt(bes[k], targets);
      eval[k] = bes[k]->CrossEntropy(l.data(), t.as_int(), rows, vocab, 1.0f, /*grad=*/false);
      untouched[k] = Down(bes[k], l);
      loss[k] = bes[k]->CrossEntropy(l.data(), t.as_int(), rows, vocab, 0.01f, /*grad=*/true);
      grad[k] = Down(bes[k], l);
    }
    const std::string v = " vocab " + std::to_string(vocab);
    EXPECT_NEAR(loss[0], loss[1], 1e-6 * std::fabs(loss[1])) << v;
    EXPECT_NEAR(eval[0], loss[0], 1e-9 * std::fabs(loss[0])) << v;
    ExpectClose(untouched[0], logits, 0, 0, "cross-entropy without grad leaves logits" + v);
    ExpectClose(grad[0], grad[1], 1e-5, 1e-9, "cross-entropy grad" + v);
  }
}

TEST_F(CudaKernelsTest, AdamWMatchesCpu) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  const int64_t n = 100001;
  auto p = Random(n, 16), g = Random(n, 17), m = Random(n, 18, -0.1f, 0.1f), v = Random(n, 19, 0, 0.01f);
  AdamWArgs a;
  a.lr = 3e-3f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.weight_decay = 0.1f, a.step = 7;
  a.grad_scale = 0.5f;
  std::vector<float> out[2][3];
  Backend* bes[2] = {gpu_.get(), cpu_.get()};
  for (int k = 0; k < 2; ++k) {
    DeviceBuffer dp = Up(bes[k], p), dg = Up(bes[k], g), dm = Up(bes[k], m), dv = Up(bes[k], v);
    for (int s = 0; s < 3; ++s) {
      a.step = 7 + s;
      bes[k]->AdamW(dp.data(), dg.data(), dm.data(), dv.data(), n, a);
    }
    out[k][0] = Down(bes[k], dp), out[k][1] = Down(bes[k], dm), out[k][2] = Down(bes[k], dv);
  }
  ExpectClose(out[0][0], out[1][0], 1e-6, 1e-7, "adamw params");
  ExpectClose(out[0][1], out[1][1], 1e-6, 1e-7, "adamw m");  // ~10 ulp of the terms (FMA contraction differs)
  ExpectClose(out[0][2], out[1][2], 1e-6, 1e-12, "adamw v");
}

TEST_F(CudaKernelsTest, AllocationErrorsAreStatuses) {
  SKIP_WITHOUT_GPU(gpu_, why_);
  auto huge = gpu_->Allocate(size_t{1} << 60);
  EXPECT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status().ToString();
  auto ok = gpu_->Allocate(1024);  // the backend is still usable afterwards
  ASSERT_TRUE(ok.ok());
  gpu_->Free(*ok);
}

}  // namespace
}  // namespace shard
