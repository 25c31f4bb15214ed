// CPU backend: attention of a chunk of query positions over the whole key
// range (context parallelism). Each chunk's out, lse and dq equal those rows
// of the whole sequence's attention, and the chunks' dK/dV contributions add
// up to the whole sequence's dK/dV — for head-tail chunks (a CP rank's two),
// chunks longer than a query tile, odd offsets, GQA and packed segments.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "shard/backend/backend.h"
#include "tests/unit/backend/backend_test_util.h"

namespace shard {
namespace {

using testing::BackendTest;
using testing::ExpectAllNear;
using testing::RandomFloats;
using testing::ToDouble;

struct Whole {
  std::vector<float> out, lse, dqkv;
};

class CpuAttentionChunkTest : public BackendTest {
 protected:
  static AttentionShape Shape(int n_heads, int n_kv, int hd, int64_t batch, int64_t seq) {
    AttentionShape s;
    s.batch = batch;
    s.seq = seq;
    s.n_heads = n_heads;
    s.n_kv_heads = n_kv;
    s.head_dim = hd;
    return s;
  }
  const int32_t* Seg(const std::vector<int32_t>& ids) {
    if (ids.empty()) return nullptr;
    seg_ = UpInt(ids);
    return seg_.as_int();
  }
  Whole RunWhole(const AttentionShape& s, const std::vector<float>& qkv, const std::vector<int32_t>& ids,
                 const std::vector<float>& dout) {
    const int64_t rows = s.batch * s.seq;
    DeviceBuffer bqkv = Up(qkv), bdout = Up(dout), bout = Filled(rows * s.out_stride(), 0.0f);
    DeviceBuffer blse = Filled(s.batch * s.n_heads * s.seq, 0.0f), bd = Filled(rows * s.qkv_stride(), 0.0f);
    const int32_t* seg = Seg(ids);
    be_->AttentionForward(s, bqkv.data(), seg, bout.data(), blse.data());
    be_->AttentionBackward(s, bqkv.data(), seg, bout.data(), blse.data(), bdout.data(), bd.data());
    return {Down(bout), Down(blse), Down(bd)};
  }

  // Checks one chunk against the whole sequence's rows and adds its dK/dV to *dkv_sum.
  void CheckChunk(const AttentionShape& s, const AttentionChunk& c, const std::vector<float>& qkv,
                  const std::vector<int32_t>& ids, const std::vector<float>& dout, const Whole& w,
                  std::vector<double>* dkv_sum) {
    SCOPED_TRACE("chunk at " + std::to_string(c.q_offset) + ", " + std::to_string(c.q_len) + " rows");
    const int64_t qw = s.out_stride(), kvw = 2LL * s.n_kv_heads * s.head_dim, qs = s.qkv_stride();
    std::vector<float> q(s.batch * c.q_len * qw), kv(s.batch * s.seq * kvw), dout_c(q.size());
    std::vector<double> want_out(q.size()), want_dq(q.size()), want_lse(s.batch * s.n_heads * c.q_len);
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t t = 0; t < s.seq; ++t)
        for (int64_t j = 0; j < kvw; ++j) kv[(b * s.seq + t) * kvw + j] = qkv[(b * s.seq + t) * qs + qw + j];
      for (int64_t r = 0; r < c.q_len; ++r) {
        const int64_t whole_row = b * s.seq + c.q_offset + r, row = b * c.q_len + r;
        for (int64_t j = 0; j < qw; ++j) {
          q[row * qw + j] = qkv[whole_row * qs + j];
          dout_c[row * qw + j] = dout[whole_row * qw + j];
          want_out[row * qw + j] = w.out[whole_row * qw + j];
          want_dq[row * qw + j] = w.dqkv[whole_row * qs + j];
        }
        for (int h = 0; h < s.n_heads; ++h)
          want_lse[(b * s.n_heads + h) * c.q_len + r] = w.lse[(b * s.n_heads + h) * s.seq + c.q_offset + r];
      }
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    DeviceBuffer bq = Up(q), bkv = Up(kv), bdout = Up(dout_c), bout = Filled(q.size(), nan);
    DeviceBuffer blse = Filled(want_lse.size(), nan), bdq = Filled(q.size(), nan), bdkv = Filled(kv.size(), nan);
    const int32_t* seg = Seg(ids);
    ASSERT_TRUE(be_->AttentionChunkForward(s, c, bq.data(), bkv.data(), seg, bout.data(), blse.data()).ok());
    ASSERT_TRUE(be_->AttentionChunkBackward(s, c, bq.data(), bkv.data(), seg, bout.data(), blse.data(),
                                            bdout.data(), bdq.data(), bdkv.data())
                    .ok());
    ExpectAllNear(Down(bout), want_out, 1e-5, 1e-6, "out");
    ExpectAllNear(Down(blse), want_lse, 1e-5, 1e-6, "lse");
    ExpectAllNear(Down(bdq), want_dq, 1e-4, 1e-5, "dq");
    const std::vector<float> dkv = Down(bdkv);
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t t = c.q_offset + c.q_len; t < s.seq; ++t)
        for (int64_t j = 0; j < kvw; ++j)
          ASSERT_EQ(dkv[(b * s.seq + t) * kvw + j], 0.0f) << "a key past the chunk gets no gradient";
    for (size_t i = 0; i < dkv.size(); ++i) (*dkv_sum)[i] += dkv[i];
  }

  // Runs every chunk of `chunks` (a partition of the positions) and checks
  // that their dK/dV add up to the whole sequence's.
  void CheckPartition(const AttentionShape& s, const std::vector<AttentionChunk>& chunks, bool segments) {
    std::vector<int32_t> ids;
    if (segments) {  // sequence 0: three documents; sequence 1: two
      ids.resize(s.batch * s.seq);
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t t = 0; t < s.seq; ++t)
          ids[b * s.seq + t] = b % 2 == 0 ? (t < s.seq / 5 ? 0 : t < s.seq * 3 / 5 ? 1 : 2) : (t < s.seq / 2 ? 4 : 7);
    }
    const std::vector<float> qkv = RandomFloats(s.batch * s.seq * s.qkv_stride(), 11, -2.0f, 2.0f);
    const std::vector<float> dout = RandomFloats(s.batch * s.seq * s.out_stride(), 12);
    const Whole w = RunWhole(s, qkv, ids, dout);
    const int64_t qw = s.out_stride(), kvw = 2LL * s.n_kv_heads * s.head_dim, qs = s.qkv_stride();
    std::vector<double> dkv_sum(s.batch * s.seq * kvw, 0.0), want(dkv_sum.size());
    for (int64_t r = 0; r < s.batch * s.seq; ++r)
      for (int64_t j = 0; j < kvw; ++j) want[r * kvw + j] = w.dqkv[r * qs + qw + j];
    for (const AttentionChunk& c : chunks) CheckChunk(s, c, qkv, ids, dout, w, &dkv_sum);
    std::vector<float> sum(dkv_sum.begin(), dkv_sum.end());
    ExpectAllNear(sum, want, 1e-4, 1e-5, "dK/dV summed over the chunks");
  }

  DeviceBuffer seg_;
};

// Head-tail chunks of context_parallel C: 2C chunks of seq/(2C); every chunk is one rank's.
std::vector<AttentionChunk> HeadTail(int64_t seq, int c) {
  std::vector<AttentionChunk> chunks;
  const int64_t len = seq / (2 * c);
  for (int64_t i = 0; i < 2 * c; ++i) chunks.push_back({i * len, len});
  return chunks;
}

TEST_F(CpuAttentionChunkTest, HeadTailChunksOfTwoRanksEqualTheWholeSequence) {
  CheckPartition(Shape(4, 2, 8, 2, 16), HeadTail(16, 2), false);
}

TEST_F(CpuAttentionChunkTest, ChunksLongerThanAQueryTileAndOddOffsets) {
  // 37 + 45 + 14 rows: tiles of 30 start at the chunk's offset, not at a multiple of 30.
  CheckPartition(Shape(4, 2, 16, 1, 96), {{0, 37}, {37, 45}, {82, 14}}, false);
}

TEST_F(CpuAttentionChunkTest, PackedDocumentsAcrossChunkBoundaries) {
  CheckPartition(Shape(4, 2, 8, 2, 80), HeadTail(80, 4), true);
}

TEST_F(CpuAttentionChunkTest, HeadDimNotAMultipleOfEightAndOneKvHead) {
  CheckPartition(Shape(2, 1, 12, 2, 24), HeadTail(24, 3), true);
}

TEST_F(CpuAttentionChunkTest, AnEmptyChunkWritesZeroKeyGradients) {
  const AttentionShape s = Shape(2, 2, 8, 1, 8);
  const std::vector<float> q, kv = RandomFloats(s.seq * 2 * s.n_kv_heads * s.head_dim, 3);
  DeviceBuffer bkv = Up(kv), bdkv = Filled(static_cast<int64_t>(kv.size()), 1.0f), none = Filled(1, 0.0f);
  ASSERT_TRUE(be_->AttentionChunkBackward(s, {4, 0}, none.data(), bkv.data(), nullptr, none.data(), none.data(),
                                          none.data(), none.data(), bdkv.data())
                  .ok());
  for (float x : Down(bdkv)) ASSERT_EQ(x, 0.0f);
}

// Every backend has the chunk ops now: the memory simulator's backend keeps
// their books (shapes and scratch, no math) so `shardctl plan --simulate` runs
// the CP code; an empty shape is accepted there as on the CPU.
TEST(AttentionChunkTest, TheSimBackendAcceptsThem) {
  auto sim = CreateBackend("sim");
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  AttentionShape s;
  EXPECT_TRUE((*sim)->AttentionChunkForward(s, {0, 0}, nullptr, nullptr, nullptr, nullptr, nullptr).ok());
  EXPECT_TRUE((*sim)->AttentionChunkBackward(s, {0, 0}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                             nullptr, nullptr)
                  .ok());
}

}  // namespace
}  // namespace shard
