// The dtype-generic collectives (mixed precision), every backend × world size
// 1..4, ranks as threads: the two-byte all-gather moves exact bits, and the
// bf16/fp16 reduce-scatter gives exactly comm::RingOrderReduce's bits — fp32
// adds, one rounding per hop, ring order — on local and gloo alike, so a job's
// results do not depend on whether its ranks are threads or processes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <cmath>

#include "shard/comm/wire_types.h"
#include "tests/unit/comm/comm_test_util.h"

namespace shard {
namespace {

using shard::testing::RunRanks;

// Uneven counts (odd, one past a 4096 chunk) and one above gloo's 1 MiB ring segment.
const int64_t kCounts[] = {0, 1, 3, 1001, 4097, 600001};
const CommOptions kOpts{std::chrono::seconds(30)};

struct Param {
  std::string backend;
  int world;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.backend << " W=" << p.world; }

class LowPrecisionCollectivesTest : public ::testing::TestWithParam<Param> {
 protected:
  const std::string& backend() const { return GetParam().backend; }
  int world() const { return GetParam().world; }
  void Run(const std::function<void(Communicator&, int)>& body) {
    ASSERT_EQ(RunRanks(backend(), world(), body), world());
  }
};

// Rank r's two-byte contribution at element i: random-looking magnitudes over
// several binades and both signs, so roundings differ from hop to hop.
uint16_t Element(DType t, int rank, int64_t i) {
  uint64_t h = static_cast<uint64_t>(rank) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i) + 1;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  const float unit = static_cast<float>(h >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;  // [-1, 1)
  const float v = std::ldexp(unit, static_cast<int>(i % 7) - 3);
  return t == DType::kBF16 ? F32ToBF16(v) : F32ToF16(v);
}

std::vector<uint16_t> Elements(DType t, int rank, int64_t n) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = Element(t, rank, i);
  return v;
}

uint16_t Expected(DType t, ReduceOp op, int world, int block, int64_t i) {
  std::vector<uint16_t> vals(world);
  for (int r = 0; r < world; ++r) vals[r] = Element(t, r, i);
  if (t == DType::kBF16)
    return comm::RingOrderReduce(op, reinterpret_cast<const comm::Bf16Bits*>(vals.data()), world, block).bits;
  return comm::RingOrderReduce(op, reinterpret_cast<const comm::F16Bits*>(vals.data()), world, block).bits;
}

TEST_P(LowPrecisionCollectivesTest, TwoByteAllGatherMovesExactBits) {
  Run([&](Communicator& c, int r) {
    for (int64_t n : kCounts) {
      std::vector<uint16_t> send = Elements(DType::kBF16, r, n);
      std::vector<uint16_t> recv(static_cast<size_t>(n * world()), 0xffff);
      ASSERT_OK(c.AllGather(send.data(), recv.data(), n, DType::kBF16, kOpts)) << n;
      for (int src = 0; src < world(); ++src)
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(recv[src * n + i], Element(DType::kBF16, src, i)) << "n=" << n << " src=" << src;
    }
  });
}

TEST_P(LowPrecisionCollectivesTest, TwoByteAllGatherInPlaceAndFp32ThroughTheGenericCall) {
  Run([&](Communicator& c, int r) {
    const int64_t n = 1001;
    std::vector<uint16_t> buf(static_cast<size_t>(n * world()), 0xffff);
    std::vector<uint16_t> mine = Elements(DType::kF16, r, n);
    std::copy(mine.begin(), mine.end(), buf.begin() + r * n);
    ASSERT_OK(c.AllGather(buf.data() + r * n, buf.data(), n, DType::kF16, kOpts));
    for (int src = 0; src < world(); ++src)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(buf[src * n + i], Element(DType::kF16, src, i));
    std::vector<float> f = shard::testing::Pattern(r, n), all(static_cast<size_t>(n * world()));
    ASSERT_OK(c.AllGather(f.data(), all.data(), n, DType::kF32, kOpts));
    for (int src = 0; src < world(); ++src)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(all[src * n + i], shard::testing::Value(src, i));
  });
}

TEST_P(LowPrecisionCollectivesTest, TwoByteReduceScatterMatchesTheRingOrderReference) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      Run([&](Communicator& c, int r) {
        for (int64_t n : kCounts) {
          // The count above the ring segment once (sum, bf16): the arithmetic is shared.
          if (n > 5000 && (op != ReduceOp::kSum || t != DType::kBF16)) continue;
          std::vector<uint16_t> send = Elements(t, r, n * world());
          std::vector<uint16_t> recv(static_cast<size_t>(n), 0xffff);
          ASSERT_OK(c.ReduceScatter(send.data(), recv.data(), n, t, op, kOpts)) << n;
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(recv[i], Expected(t, op, world(), r, r * n + i))
                << DTypeName(t) << " " << ReduceOpName(op) << " n=" << n << " i=" << i;
        }
      });
    }
  }
}

TEST_P(LowPrecisionCollectivesTest, TwoByteReduceScatterInPlace) {
  Run([&](Communicator& c, int r) {
    const int64_t n = 777;
    std::vector<uint16_t> buf = Elements(DType::kBF16, r, n * world());
    uint16_t* mine = buf.data() + r * n;
    ASSERT_OK(c.ReduceScatter(buf.data(), mine, n, DType::kBF16, ReduceOp::kSum, kOpts));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(mine[i], Expected(DType::kBF16, ReduceOp::kSum, world(), r, r * n + i));
  });
}

TEST_P(LowPrecisionCollectivesTest, Fp32ThroughTheGenericReduceScatterIsTheFloatCall) {
  Run([&](Communicator& c, int r) {
    const int64_t n = 1000;
    std::vector<float> send = shard::testing::Pattern(r, n * world(), 2), recv(n);
    ASSERT_OK(c.ReduceScatter(send.data(), recv.data(), n, DType::kF32, ReduceOp::kSum, kOpts));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(recv[i], shard::testing::Reduced(ReduceOp::kSum, world(), r * n + i, 2));
  });
}

std::vector<Param> AllParams() {
  std::vector<Param> out;
  for (const char* backend : {"local", "gloo"})
    for (int w = 1; w <= 4; ++w) out.push_back({backend, w});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, LowPrecisionCollectivesTest, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.backend + "_W" + std::to_string(info.param.world);
                         });

}  // namespace
}  // namespace shard
