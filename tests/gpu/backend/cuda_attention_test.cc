// Flash attention on CUDA against the CPU backend's attention (itself checked
// against a naive reference and finite differences in tests/unit/backend):
// forward output and log-sum-exp, and the backward dQ/dK/dV, for head dims
// 32/48/64/128 (48 exercises the zero padding to 64), GQA groups 1/2/4,
// sequence lengths that are not tile multiples, and packed segments.
//
// Tolerances: out and lse atol 2e-5 (+ rtol 1e-4); dqkv atol 1e-4 + rtol 1e-3
// (fp32 throughout; the kernels use __expf and a different summation order).
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <random>

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

// Segment ids: runs of random length (1..seq/3), restarting per sequence.
std::vector<int32_t> Segments(const Case& c, uint32_t seed) {
  std::vector<int32_t> seg(c.batch * c.seq);
  std::mt19937 rng(seed);
  for (int64_t b = 0; b < c.batch; ++b) {
    int32_t id = 0;
    int64_t left = 1 + rng() % std::max<int64_t>(1, c.seq / 3);
    for (int64_t t = 0; t < c.seq; ++t) {
      if (left-- == 0) {
        ++id;
        left = rng() % std::max<int64_t>(1, c.seq / 3);
      }
      seg[b * c.seq + t] = id;
    }
  }
  return seg;
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

Result RunAttention(Backend* be, const Case& c, const std::vector<float>& qkv, const std::vector<int32_t>* seg,
           const std::vector<float>& dout) {
  AttentionShape s{c.batch, c.seq, c.heads, c.kv, c.hd};
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

}  // namespace
}  // namespace shard
