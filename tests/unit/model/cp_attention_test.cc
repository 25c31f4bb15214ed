// Context parallelism's attention with its ranks as threads (local
// communicator): C ranks each hold the head and tail chunk of every sequence;
// their out, and their dQ/dK/dV after the group's reduce-scatter, equal those
// rows of the whole sequence's attention on one rank (fp32, to float
// tolerance), for C = 2 and 4, GQA, and packed documents across chunks.
#include "shard/model/cp_attention.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <vector>

#include "shard/backend/profiling_backend.h"
#include "shard/spec/context_parallel.h"
#include "shard/train/cp_exchange.h"
#include "tests/unit/backend/backend_test_util.h"
#include "tests/unit/comm/comm_test_util.h"

namespace shard {
namespace {

using testing::ExpectAllNear;
using testing::RandomFloats;
using testing::RunRanks;

struct Case {
  int c;
  int64_t batch, seq;
  int n_heads, n_kv, hd;
  bool segments;
};

void PrintTo(const Case& k, std::ostream* os) {
  *os << "C " << k.c << ", batch " << k.batch << ", seq " << k.seq << ", heads " << k.n_heads << "/" << k.n_kv
      << ", head_dim " << k.hd << (k.segments ? ", packed" : "");
}

struct Whole {
  std::vector<float> qkv, dout, out, dqkv;
  std::vector<int32_t> seg;
};

std::vector<double> AsDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

Whole RunWhole(const AttentionShape& s, bool segments) {
  auto be = CreateBackend("cpu");
  EXPECT_TRUE(be.ok());
  Whole w;
  w.qkv = RandomFloats(s.batch * s.seq * s.qkv_stride(), 21, -2.0f, 2.0f);
  w.dout = RandomFloats(s.batch * s.seq * s.out_stride(), 22);
  if (segments)  // documents of 5, 11, then the rest (sequence 0); 17, the rest (1)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t t = 0; t < s.seq; ++t)
        w.seg.push_back(b % 2 == 0 ? (t < 5 ? 0 : t < 16 ? 1 : 2) : (t < 17 ? 0 : 1));
  w.out.assign(s.batch * s.seq * s.out_stride(), 0.0f);
  w.dqkv.assign(w.qkv.size(), 0.0f);
  std::vector<float> lse(s.batch * s.n_heads * s.seq);
  const int32_t* seg = segments ? w.seg.data() : nullptr;
  (*be)->AttentionForward(s, w.qkv.data(), seg, w.out.data(), lse.data());
  (*be)->AttentionBackward(s, w.qkv.data(), seg, w.out.data(), lse.data(), w.dout.data(), w.dqkv.data());
  return w;
}

class CpAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(CpAttentionTest, RanksTogetherEqualTheWholeSequence) {
  const Case k = GetParam();
  const AttentionShape whole{k.batch, k.seq, k.n_heads, k.n_kv, k.hd, DType::kF32};
  const Whole w = RunWhole(whole, k.segments);
  AttentionShape local = whole;
  local.seq = k.seq / k.c;
  const int ran = RunRanks("local", k.c, [&](Communicator& comm, int r) {
    auto be = CreateBackend("cpu");
    ASSERT_TRUE(be.ok());
    CommCpExchange group(&comm, CommOptions());
    CpAttention attn(be->get(), &group);
    const std::vector<float> qkv = LocalRows(w.qkv, k.batch, k.seq, whole.qkv_stride(), k.c, r);
    const std::vector<float> dout = LocalRows(w.dout, k.batch, k.seq, whole.out_stride(), k.c, r);
    std::vector<float> out(dout.size()), lse(k.batch * k.n_heads * local.seq), dqkv(qkv.size());
    const int32_t* seg = k.segments ? w.seg.data() : nullptr;
    ASSERT_TRUE(attn.Forward(local, qkv.data(), seg, out.data(), lse.data()).ok());
    ASSERT_TRUE(attn.Backward(local, qkv.data(), seg, out.data(), lse.data(), dout.data(), dqkv.data()).ok());
    SCOPED_TRACE("CP rank " + std::to_string(r));
    ExpectAllNear(out, AsDouble(LocalRows(w.out, k.batch, k.seq, whole.out_stride(), k.c, r)), 1e-5, 1e-6, "out");
    ExpectAllNear(dqkv, AsDouble(LocalRows(w.dqkv, k.batch, k.seq, whole.qkv_stride(), k.c, r)), 1e-4, 1e-5,
                  "dqkv");
  });
  EXPECT_EQ(ran, k.c);
}

INSTANTIATE_TEST_SUITE_P(Groups, CpAttentionTest,
                         ::testing::Values(Case{2, 2, 16, 4, 2, 8, false}, Case{2, 2, 40, 4, 2, 8, true},
                                           Case{4, 1, 64, 4, 1, 16, false}, Case{4, 2, 72, 2, 2, 12, true}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return "C" + std::to_string(i.param.c) + "S" + std::to_string(i.param.seq) +
                                  (i.param.segments ? "Packed" : "");
                         });

// What CpAttention holds (every allocation through the rank's backend: the
// test's own arrays are host vectors): at most three buffers of the whole
// sequences' K/V (the gathered blocks, their reordering, the summed dK/dV;
// the chunks' dK/dV and the reduce-scatter's send buffer reuse the first
// two), two of the rank's own K/V rows and four of one chunk's queries.
TEST(CpAttentionMemoryTest, AtMostThreeWholeLengthKvBuffers) {
  const Case k{2, 2, 40, 4, 2, 8, true};
  const AttentionShape whole{k.batch, k.seq, k.n_heads, k.n_kv, k.hd, DType::kF32};
  const Whole w = RunWhole(whole, k.segments);
  AttentionShape local = whole;
  local.seq = k.seq / k.c;
  const int64_t kvw = 2LL * k.n_kv * k.hd;
  const int64_t full = k.batch * k.seq * kvw, mine = k.batch * local.seq * kvw;
  const int64_t chunk = k.batch * (local.seq / 2) * whole.out_stride();
  const int64_t bound = static_cast<int64_t>(sizeof(float)) * (3 * full + 2 * mine + 4 * chunk);
  RunRanks("local", k.c, [&](Communicator& comm, int r) {
    auto cpu = CreateBackend("cpu");
    ASSERT_TRUE(cpu.ok());
    std::unique_ptr<Backend> be = WrapWithProfiler(std::move(*cpu), nullptr);
    CommCpExchange group(&comm, CommOptions());
    CpAttention attn(be.get(), &group);
    const std::vector<float> qkv = LocalRows(w.qkv, k.batch, k.seq, whole.qkv_stride(), k.c, r);
    const std::vector<float> dout = LocalRows(w.dout, k.batch, k.seq, whole.out_stride(), k.c, r);
    std::vector<float> out(dout.size()), lse(k.batch * k.n_heads * local.seq), dqkv(qkv.size());
    ASSERT_TRUE(attn.Forward(local, qkv.data(), w.seg.data(), out.data(), lse.data()).ok());
    ASSERT_TRUE(attn.Backward(local, qkv.data(), w.seg.data(), out.data(), lse.data(), dout.data(), dqkv.data()).ok());
    EXPECT_LE(ProfilePeakBytes(be.get()), bound) << "CP rank " << r << ": whole-length K/V buffer is "
                                                 << full * sizeof(float) << " bytes";
    ExpectAllNear(dqkv, AsDouble(LocalRows(w.dqkv, k.batch, k.seq, whole.qkv_stride(), k.c, r)), 1e-4, 1e-5,
                  "dqkv");
  });
}

TEST(ContextParallelLayoutTest, HeadTailChunksAndTheChecks) {
  const auto r0 = HeadTailChunks(16, 2, 0), r1 = HeadTailChunks(16, 2, 1);
  EXPECT_EQ(r0[0].offset, 0);
  EXPECT_EQ(r0[1].offset, 12);
  EXPECT_EQ(r1[0].offset, 4);
  EXPECT_EQ(r1[1].offset, 8);
  EXPECT_EQ(r0[0].len, 4);
  EXPECT_TRUE(CheckContextParallel(1, 7, 3).ok());
  EXPECT_TRUE(CheckContextParallel(2, 16, 4).ok());
  const Status odd = CheckContextParallel(3, 100, 6);
  EXPECT_EQ(odd.message(),
            "parallel.context_parallel 3: seq_len 100 is not a multiple of 2 x 3 = 6 (each sequence is cut into 2C "
            "equal chunks)");
  EXPECT_EQ(CheckContextParallel(2, 16, 3).message(),
            "parallel.context_parallel 2: does not divide parallel.world_size 3");
  EXPECT_FALSE(CheckContextParallel(0, 16, 2).ok());
}

}  // namespace
}  // namespace shard
