// Resharding reads. PlanUnitRead is pure: which (file, element range) pieces
// make up [begin, end) of a unit, given the ranges the saved shards hold. Then
// CheckpointReader::ReadUnitRange end to end: any saved shard count read back
// under any new shard count gives the same elements, padding reads as zero,
// and a hole (a range no file holds) is an error, not silent zeros.
#include <gtest/gtest.h>

#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard {

// In namespace shard so that argument-dependent lookup finds them for gtest.
inline bool operator==(const ReadPiece& a, const ReadPiece& b) {
  return a.file == b.file && a.from == b.from && a.count == b.count && a.dst_offset == b.dst_offset;
}
inline std::ostream& operator<<(std::ostream& os, const ReadPiece& p) {
  return os << "{file " << p.file << ", from " << p.from << ", count " << p.count << ", dst " << p.dst_offset << "}";
}

namespace {

using namespace ckpt_testing;

// Headers of one unit of `numel` saved as the given [begin, begin+count) ranges.
std::vector<ShardHeader> Saved(int64_t numel, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::vector<ShardHeader> hs;
  for (size_t i = 0; i < ranges.size(); ++i) {
    ShardHeader h;
    h.shard_rank = static_cast<int>(i);
    h.shard_count = static_cast<int>(ranges.size());
    ShardUnit u;
    u.name = "u";
    u.numel = numel;
    u.begin = ranges[i].first;
    u.count = ranges[i].second;
    h.units.push_back(u);
    hs.push_back(h);
  }
  return hs;
}

using Pieces = std::vector<ReadPiece>;

TEST(PlanUnitReadTest, TwoShardsReadAsThree) {
  // numel 10 saved as [0,5) [5,10); read with shards of 4 (padded to 12).
  const auto hs = Saved(10, {{0, 5}, {5, 5}});
  EXPECT_EQ(PlanUnitRead(hs, 0, 0, 4), (Pieces{{0, 0, 4, 0}}));
  EXPECT_EQ(PlanUnitRead(hs, 0, 4, 8), (Pieces{{0, 4, 1, 0}, {1, 5, 3, 1}}));
  EXPECT_EQ(PlanUnitRead(hs, 0, 8, 12), (Pieces{{1, 8, 2, 0}})) << "clipped at numel: 10, 11 are padding";
}

TEST(PlanUnitReadTest, FourShardsReadAsOne) {
  // numel 10 saved by 4 ranks of 3 (the last holds one element).
  const auto hs = Saved(10, {{0, 3}, {3, 3}, {6, 3}, {9, 1}});
  EXPECT_EQ(PlanUnitRead(hs, 0, 0, 12), (Pieces{{0, 0, 3, 0}, {1, 3, 3, 3}, {2, 6, 3, 6}, {3, 9, 1, 9}}));
  // The whole unit unpadded gives the same pieces.
  EXPECT_EQ(PlanUnitRead(hs, 0, 0, 10), PlanUnitRead(hs, 0, 0, 12));
}

TEST(PlanUnitReadTest, OneShardReadAsThree) {
  const auto hs = Saved(10, {{0, 10}});
  EXPECT_EQ(PlanUnitRead(hs, 0, 0, 4), (Pieces{{0, 0, 4, 0}}));
  EXPECT_EQ(PlanUnitRead(hs, 0, 4, 8), (Pieces{{0, 4, 4, 0}}));
  EXPECT_EQ(PlanUnitRead(hs, 0, 8, 12), (Pieces{{0, 8, 2, 0}}));
}

TEST(PlanUnitReadTest, RangesWhollyInThePaddingNeedNothing) {
  const auto hs = Saved(10, {{0, 5}, {5, 5}});
  EXPECT_TRUE(PlanUnitRead(hs, 0, 10, 12).empty());
  EXPECT_TRUE(PlanUnitRead(hs, 0, 12, 16).empty());
  EXPECT_TRUE(PlanUnitRead(hs, 0, 3, 3).empty()) << "an empty range";
}

TEST(PlanUnitReadTest, EmptyShardsAndUnorderedFilesAreHandled) {
  // numel 3 saved by 4 ranks: the last holds nothing (begin clamped to numel).
  // Files listed out of range order: pieces still come in destination order.
  const auto hs = Saved(3, {{2, 1}, {3, 0}, {0, 1}, {1, 1}});
  EXPECT_EQ(PlanUnitRead(hs, 0, 0, 4), (Pieces{{2, 0, 1, 0}, {3, 1, 1, 1}, {0, 2, 1, 2}}));
}

TEST(PlanUnitReadTest, AHoleIsLeftOutForTheCallerToDetect) {
  const auto hs = Saved(10, {{0, 3}, {6, 4}});  // [3, 6) missing
  EXPECT_EQ(PlanUnitRead(hs, 0, 0, 10), (Pieces{{0, 0, 3, 0}, {1, 6, 4, 6}}));
}

TEST(PlanUnitReadTest, PicksTheRightUnit) {
  std::vector<ShardHeader> hs = {HeaderFor(1, 0, 2), HeaderFor(1, 1, 2)};
  // Unit 1 has numel 101: shards [0,51) and [51,101).
  EXPECT_EQ(PlanUnitRead(hs, 1, 50, 52), (Pieces{{0, 50, 1, 0}, {1, 51, 1, 1}}));
  // Unit 2 has numel 10: shards [0,5) and [5,10).
  EXPECT_EQ(PlanUnitRead(hs, 2, 4, 6), (Pieces{{0, 4, 1, 0}, {1, 5, 1, 1}}));
}

class ReshardReadTest : public ProtocolTest {};

// Every saved shard count × every read shard count (with FSDP padding): each
// element reads back exactly, padding is zero, params/m/v stay apart.
TEST_F(ReshardReadTest, AnySavedLayoutReadsUnderAnyNewLayout) {
  for (int saved : {1, 2, 3, 4}) {
    const std::string step = MakeCommittedStep(Path("job" + std::to_string(saved)), 7, saved);
    auto reader = CheckpointReader::Open(step, true);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    for (int now : {1, 2, 3, 5}) {
      SCOPED_TRACE("saved " + std::to_string(saved) + " read as " + std::to_string(now));
      const auto units = Units();
      for (int u = 0; u < static_cast<int>(units.size()); ++u) {
        const int64_t numel = units[u].second;
        const int64_t shard = (numel + 4 * now - 1) / (4 * now) * 4;  // padded, 4-aligned as FSDP cuts
        for (int r = 0; r < now; ++r) {
          const int64_t b = r * shard, e = (r + 1) * shard;
          std::vector<float> p(shard, -1.0f), m(shard, -1.0f), v(shard, -1.0f);
          Status st = reader->ReadUnitRange(u, b, e, p.data(), m.data(), v.data());
          ASSERT_TRUE(st.ok()) << st.ToString();
          for (int64_t i = b; i < e; ++i) {
            if (i < numel) {
              ASSERT_EQ(p[i - b], Value(7, u, 0, i)) << "unit " << u << " element " << i;
              ASSERT_EQ(m[i - b], Value(7, u, 1, i)) << "unit " << u << " element " << i;
              ASSERT_EQ(v[i - b], Value(7, u, 2, i)) << "unit " << u << " element " << i;
            } else {
              ASSERT_EQ(p[i - b], 0.0f) << "padding must read as zero";
              ASSERT_EQ(m[i - b], 0.0f);
              ASSERT_EQ(v[i - b], 0.0f);
            }
          }
        }
      }
    }
    // Only some arrays asked for: the others are untouched (null).
    std::vector<float> p(10);
    ASSERT_TRUE(reader->ReadUnitRange(2, 0, 10, p.data(), nullptr, nullptr).ok());
    EXPECT_EQ(p[9], Value(7, 2, 0, 9));
    EXPECT_EQ(reader->ReadUnitRange(3, 0, 1, p.data(), nullptr, nullptr).code(), StatusCode::kOutOfRange);
  }
}

// A manifest whose files do not cover a unit (both entries name shard 0's
// file, so shard 1's range is in no file) is not a checkpoint: Open refuses it
// (issue 18 item 1: it used to open, and export wrote zeros for the rest).
TEST_F(ReshardReadTest, UncoveredStepIsRefusedAtOpen) {
  const std::string step = MakeCommittedStep(Path("job"), 3, 2);
  auto m = Manifest::FromJson(ReadBytes(step + "/COMMITTED"), "x");
  ASSERT_TRUE(m.ok());
  m->files[1] = m->files[0];
  WriteBytes(step + "/COMMITTED", m->ToJson());
  auto reader = CheckpointReader::Open(step, true);
  ASSERT_FALSE(reader.ok()) << "an incomplete step opened";
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss) << reader.status().ToString();
  EXPECT_NE(reader.status().message().find("twice"), std::string::npos) << reader.status().ToString();
}

}  // namespace
}  // namespace shard
