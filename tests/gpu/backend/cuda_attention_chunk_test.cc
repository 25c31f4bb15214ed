// Context parallelism's chunked attention on CUDA (Backend::AttentionChunk*)
// against the CPU backend's, which tests/unit/backend checks against the
// whole sequence's attention: a chunk of queries at an offset into the full
// key range, its output and log-sum-exp, and the backward's dQ and its dK/dV
// contribution to every key row (zero past the chunk). Head-tail chunks of
// C = 2 and 4, offsets and lengths that are not tile multiples, GQA, packed
// segments that cross chunk boundaries, head dims 32/64/128 and 48 (padded),
// and compute bf16 (q, k, v rounded, as on the CPU).
//
// Tolerances as the fused attention's (cuda_attention_test.cc): out and lse
// atol 2e-5 + rtol 1e-4, dq/dkv atol 1e-4 + rtol 1e-3 (fp32; __expf and
// another summation order). The backward has no atomics: same bits twice.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <random>

#include "shard/spec/context_parallel.h"
#include "tests/gpu/gpu_test_util.h"

namespace shard {
namespace {

using gpu_testing::Down;
using gpu_testing::ExpectClose;
using gpu_testing::Random;
using gpu_testing::Up;
using gpu_testing::UpInt;

struct ChunkCase {
  int64_t batch, seq;
  int heads, kv, hd;
  bool packed;
  int cp, cp_rank;  // the chunk: head (or tail) chunk of HeadTailChunks(seq, cp, cp_rank)
  bool tail;
  DType compute;
};

std::string Name(const ChunkCase& c) {
  return "b" + std::to_string(c.batch) + "_T" + std::to_string(c.seq) + "_H" + std::to_string(c.heads) + "_" +
         std::to_string(c.kv) + "_hd" + std::to_string(c.hd) + (c.packed ? "_packed" : "") + "_C" +
         std::to_string(c.cp) + "r" + std::to_string(c.cp_rank) + (c.tail ? "tail" : "head") +
         (c.compute == DType::kF32 ? "" : "_bf16");
}

struct ChunkResult {
  std::vector<float> out, lse, dq, dkv;
};

ChunkResult RunChunk(Backend* be, const ChunkCase& c, const AttentionChunk& ch, const std::vector<float>& q,
                     const std::vector<float>& kv, const std::vector<int32_t>* seg, const std::vector<float>& dout) {
  AttentionShape s{c.batch, c.seq, c.heads, c.kv, c.hd};
  s.compute = c.compute;
  const int64_t qrows = c.batch * ch.q_len;
  DeviceBuffer dq_in = Up(be, q), dkv_in = Up(be, kv), d = Up(be, dout);
  DeviceBuffer o = Up(be, std::vector<float>(qrows * s.out_stride()));
  DeviceBuffer lse = Up(be, std::vector<float>(qrows * c.heads));
  DeviceBuffer dq = Up(be, std::vector<float>(q.size(), 7.0f));    // must be overwritten
  DeviceBuffer dkv = Up(be, std::vector<float>(kv.size(), 7.0f));  // every key row, zeros included
  DeviceBuffer sg;
  if (seg) sg = UpInt(be, *seg);
  const int32_t* sp = seg ? sg.as_int() : nullptr;
  EXPECT_TRUE(be->AttentionChunkForward(s, ch, dq_in.data(), dkv_in.data(), sp, o.data(), lse.data()).ok());
  EXPECT_TRUE(be->AttentionChunkBackward(s, ch, dq_in.data(), dkv_in.data(), sp, o.data(), lse.data(), d.data(),
                                         dq.data(), dkv.data())
                  .ok());
  return {Down(be, o), Down(be, lse), Down(be, dq), Down(be, dkv)};
}

class CudaAttentionChunkTest : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(CudaAttentionChunkTest, ChunkMatchesCpu) {
  std::string why;
  auto gpu = gpu_testing::MaybeCuda(&why);
  SKIP_WITHOUT_GPU(gpu, why);
  auto cpu = CreateBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  const ChunkCase c = GetParam();
  const auto chunks = HeadTailChunks(c.seq, c.cp, c.cp_rank);
  const CpChunk& pick = chunks[c.tail ? 1 : 0];
  const AttentionChunk ch{pick.offset, pick.len};
  AttentionShape s{c.batch, c.seq, c.heads, c.kv, c.hd};
  auto q = Random(c.batch * ch.q_len * s.out_stride(), 10 + c.hd, -1.5f, 1.5f);
  auto kv = Random(c.batch * c.seq * 2 * c.kv * c.hd, 20 + c.hd, -1.5f, 1.5f);
  auto dout = Random(c.batch * ch.q_len * s.out_stride(), 30 + c.hd);
  std::vector<int32_t> seg;
  if (c.packed) seg = gpu_testing::PackedSegments(c.batch, c.seq, 40 + static_cast<uint32_t>(c.seq));
  const std::vector<int32_t>* sp = c.packed ? &seg : nullptr;
  ChunkResult g = RunChunk(gpu.get(), c, ch, q, kv, sp, dout);
  ChunkResult r = RunChunk(cpu->get(), c, ch, q, kv, sp, dout);
  const std::string n = Name(c);
  ExpectClose(g.out, r.out, 1e-4, 2e-5, "chunk out " + n);
  ExpectClose(g.lse, r.lse, 1e-4, 2e-5, "chunk lse " + n);
  ExpectClose(g.dq, r.dq, 1e-3, 1e-4, "chunk dq " + n);
  ExpectClose(g.dkv, r.dkv, 1e-3, 1e-4, "chunk dkv " + n);
  ChunkResult again = RunChunk(gpu.get(), c, ch, q, kv, sp, dout);
  EXPECT_EQ(0, std::memcmp(again.dkv.data(), g.dkv.data(), g.dkv.size() * sizeof(float))) << n;
}

INSTANTIATE_TEST_SUITE_P(
    Chunks, CudaAttentionChunkTest,
    ::testing::Values(ChunkCase{2, 96, 4, 2, 32, false, 2, 0, false, DType::kF32},
                      ChunkCase{2, 96, 4, 2, 32, true, 2, 0, true, DType::kF32},
                      ChunkCase{1, 200, 8, 2, 64, true, 4, 1, false, DType::kF32},
                      ChunkCase{1, 200, 8, 2, 64, false, 4, 3, true, DType::kF32},
                      ChunkCase{2, 264, 8, 4, 128, true, 2, 1, true, DType::kF32},
                      ChunkCase{1, 136, 6, 3, 48, true, 4, 2, false, DType::kF32},
                      ChunkCase{1, 1024, 8, 2, 64, false, 4, 0, true, DType::kF32},
                      ChunkCase{2, 128, 8, 2, 64, true, 2, 1, true, DType::kBF16}),
    [](const ::testing::TestParamInfo<ChunkCase>& info) {
      std::string n = Name(info.param);
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

}  // namespace
}  // namespace shard
