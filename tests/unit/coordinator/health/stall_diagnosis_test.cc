// The flight recorder's stall diagnosis, one case per rule, from made-up
// records (what the ranks' heartbeats carry): a collective timeout, a hang
// with one rank outside collectives, a desync, a dead rank, a collective
// every rank is inside, a stall outside collectives, two groups, a rank that
// never ran a collective, and nothing to say.
#include "coordinator/health/stall_diagnosis.h"

#include <gtest/gtest.h>

namespace shardd {
namespace {

constexpr int64_t kNow = 1'000'000;

CollectiveSeen C(int64_t seq, const std::string& op, int unit, int64_t start_ago_ms, int64_t end_ago_ms = -1,
                 bool failed = false, const std::string& group = "shard0", int size = 4) {
  CollectiveSeen c;
  c.group = group;
  c.group_size = size;
  c.seq = seq;
  c.op = op;
  c.unit = unit;
  c.bytes = op == "all_reduce" ? 8 : 4096;
  c.start_ms = kNow - start_ago_ms;
  c.end_ms = end_ago_ms < 0 ? -1 : kNow - end_ago_ms;
  c.failed = failed;
  return c;
}

StallInput Ranks(std::vector<std::vector<CollectiveSeen>> per_rank, StallTrigger t = StallTrigger::kHang) {
  StallInput in;
  in.trigger = t;
  in.now_ms = kNow;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    RankFlight f;
    f.rank = static_cast<int>(r);
    f.heard_ms = kNow - 500;
    f.collectives = per_rank[r];
    in.ranks.push_back(f);
  }
  return in;
}

// Ranks 0, 1 and 3 entered all_gather #4121 (having finished #4120); rank 2
// finished #4120 and never came.
StallInput RankTwoStalled(bool timed_out) {
  auto waiting = [&] {
    return std::vector<CollectiveSeen>{C(4120, "reduce_scatter", 16, 62'600, 62'100),
                                       timed_out ? C(4121, "all_gather", 17, 62'000, 2'000, true)
                                                 : C(4121, "all_gather", 17, 62'000)};
  };
  return Ranks({waiting(), waiting(), {C(4120, "reduce_scatter", 16, 63'400, 63'000)}, waiting()},
               timed_out ? StallTrigger::kCollectiveTimeout : StallTrigger::kHang);
}

TEST(StallDiagnosisTest, AHangNamesTheRankThatNeverEnteredAndWhatItLastDid) {
  EXPECT_EQ(DiagnoseStall(RankTwoStalled(false)),
            "ranks 0,1,3 waited 62 s in all_gather #4121 (unit 17); rank 2 never entered it: its last collective "
            "was reduce_scatter #4120 (unit 16), ended 63 s ago");
}

TEST(StallDiagnosisTest, ACollectiveTimeoutSaysHowLongTheWaitersWaitedUntilItFailed) {
  EXPECT_EQ(DiagnoseStall(RankTwoStalled(true)),
            "ranks 0,1,3 waited 60 s in all_gather #4121 (unit 17) until it failed; rank 2 never entered it: its "
            "last collective was reduce_scatter #4120 (unit 16), ended 63 s ago");
}

TEST(StallDiagnosisTest, RanksThatDisagreeOnACallNumberAreADesync) {
  auto in = Ranks({{C(40, "all_reduce", -1, 900, 800), C(41, "all_gather", 3, 700)},
                   {C(40, "all_reduce", -1, 900, 800), C(41, "all_reduce", -1, 700)},
                   {C(40, "all_reduce", -1, 900, 800), C(41, "all_gather", 3, 700)}});
  EXPECT_EQ(DiagnoseStall(in),
            "ranks disagree on collective #41: ranks 0,2 called all_gather (unit 3, 4096 B), rank 1 called "
            "all_reduce (8 B); their code paths diverged (a desync)");
}

TEST(StallDiagnosisTest, ADeadRankIsSaidToHaveDiedWithItsLastCollective) {
  StallInput in = RankTwoStalled(false);
  in.trigger = StallTrigger::kRankDied;
  in.ranks[2].dead = true;
  in.ranks[2].dead_how = "was killed by signal 9";
  EXPECT_EQ(DiagnoseStall(in),
            "ranks 0,1,3 waited 62 s in all_gather #4121 (unit 17); rank 2 never entered it: it was killed by "
            "signal 9; its last collective was reduce_scatter #4120 (unit 16), ended 63 s ago");
}

TEST(StallDiagnosisTest, ARankThatDiedInsideTheCollectiveIsNotMissing) {
  auto in = Ranks({{C(7, "all_gather", 1, 3'000)}, {C(7, "all_gather", 1, 3'100)}}, StallTrigger::kRankDied);
  in.ranks[1].dead = true;
  EXPECT_EQ(DiagnoseStall(in), "rank 0 waited 3.0 s in all_gather #7 (unit 1); rank 1 died inside it");
}

// A rank that failed by itself (a full disk, not a collective's timeout) is
// named with its error, never "the collective itself is stuck".
TEST(StallDiagnosisTest, ARankThatFailedIsNamedWithItsError) {
  auto in = Ranks({{C(7, "all_gather", 1, 3'000)}, {C(7, "all_gather", 1, 3'100)}}, StallTrigger::kRankDied);
  in.ranks[1].dead = true;
  in.ranks[1].dead_how = "failed: DATA_LOSS: cannot create /dev/shm/x: No space left on device";
  EXPECT_EQ(DiagnoseStall(in), "rank 0 waited 3.0 s in all_gather #7 (unit 1); rank 1 died inside it: it failed: "
                               "DATA_LOSS: cannot create /dev/shm/x: No space left on device");
  // Its record says it finished the call the others wait in: it left them.
  in.ranks[1].collectives = {C(7, "all_gather", 1, 3'100, 2'900)};
  in.ranks[1].dead_how = "exited with code 1";
  EXPECT_EQ(DiagnoseStall(in),
            "rank 0 waited 3.0 s in all_gather #7 (unit 1); rank 1 is gone from the group: it exited with code 1");
}

TEST(StallDiagnosisTest, EveryRankInsideMeansTheCollectiveItselfIsStuck) {
  std::vector<std::vector<CollectiveSeen>> all(4, {C(4121, "all_gather", 17, 62'000)});
  EXPECT_EQ(DiagnoseStall(Ranks(all)),
            "ranks 0-3 waited 62 s in all_gather #4121 (unit 17); no rank of the group is missing: the collective "
            "itself is stuck (the network or the backend)");
}

TEST(StallDiagnosisTest, NoRankInsideACollectiveMeansTheStallIsOutsideThem) {
  auto in = Ranks({{C(40, "all_reduce", -1, 12'500, 12'000)},
                   {C(40, "all_reduce", -1, 12'500, 12'100)},
                   {C(39, "reduce_scatter", 5, 14'000, 13'000)}});
  EXPECT_EQ(DiagnoseStall(in),
            "no rank is inside a collective, so the stall is outside them (data, checkpoint I/O or compute); ranks "
            "0,1 last finished all_reduce #40, 12 s ago; rank 2 last finished reduce_scatter #39 (unit 5), 13 s ago");
}

TEST(StallDiagnosisTest, SeveralGroupsAreNamedAndOnlyTheGroupsOwnRanksCanBeMissing) {
  // Hybrid sharding, 2 x 2: shard0 = {0, 1}, shard1 = {2, 3}. Rank 3 stalls
  // after shard1's #9; rank 2 waits in shard1's #10; shard0 is fine.
  auto in = Ranks({{C(10, "all_gather", 2, 5'000, 4'900, false, "shard0", 2)},
                   {C(10, "all_gather", 2, 5'000, 4'900, false, "shard0", 2)},
                   {C(9, "all_gather", 1, 21'000, 20'900, false, "shard1", 2),
                    C(10, "all_gather", 2, 20'000, -1, false, "shard1", 2)},
                   {C(9, "all_gather", 1, 21'000, 20'950, false, "shard1", 2)}});
  EXPECT_EQ(DiagnoseStall(in),
            "rank 2 waited 20 s in all_gather #10 (unit 2, group shard1); rank 3 never entered it: its last "
            "collective was all_gather #9 (unit 1, group shard1), ended 21 s ago");
}

TEST(StallDiagnosisTest, ARankWithNoCollectiveYetIsMissingFromAGroupShortOfMembers) {
  auto in = Ranks({{C(1, "all_reduce", -1, 9'000)}, {C(1, "all_reduce", -1, 9'000)}, {}});
  for (auto& r : in.ranks)
    for (auto& c : r.collectives) c.group_size = 3;
  EXPECT_EQ(DiagnoseStall(in),
            "ranks 0,1 waited 9.0 s in all_reduce #1; rank 2 never entered it: it has run no collective yet");
}

TEST(StallDiagnosisTest, NothingReportedIsNothingToSay) {
  EXPECT_EQ(DiagnoseStall(Ranks({{}, {}})), "");
  EXPECT_EQ(DiagnoseStall(StallInput{}), "");
}

TEST(StallDiagnosisTest, TheStalledRanksAreTheLiveOnesThatNeverEntered) {
  EXPECT_EQ(StalledRanks(RankTwoStalled(false)), std::vector<int>{2});
  EXPECT_EQ(StalledRanks(RankTwoStalled(true)), std::vector<int>{2});
  StallInput dead = RankTwoStalled(false);
  dead.ranks[2].dead = true;
  EXPECT_TRUE(StalledRanks(dead).empty()) << "a dead rank is not a hang's culprit";
  EXPECT_TRUE(StalledRanks(Ranks(std::vector<std::vector<CollectiveSeen>>(4, {C(4121, "all_gather", 17, 62'000)})))
                  .empty())
      << "every rank inside: nobody to blame";
  EXPECT_TRUE(StalledRanks(Ranks({{C(40, "all_reduce", -1, 12'500, 12'000)}, {C(39, "reduce_scatter", 5, 14'000, 13'000)}}))
                  .empty())
      << "outside collectives";
  EXPECT_TRUE(StalledRanks(Ranks({{C(41, "all_gather", 3, 5'000)}, {C(41, "all_reduce", -1, 5'000)}})).empty())
      << "a desync";
  EXPECT_TRUE(StalledRanks(Ranks({{}, {}})).empty());
}

TEST(StallDiagnosisTest, RankListsUseRangesForRunsOfThree) {
  EXPECT_EQ(RankList({3, 0, 1}), "0,1,3");
  EXPECT_EQ(RankList({0, 1, 2, 3, 4, 5, 7}), "0-5,7");
  EXPECT_EQ(RankList({5}), "5");
  EXPECT_EQ(RankList({}), "");
}

TEST(StallDiagnosisTest, StatusDescribesARanksNewestCollective) {
  EXPECT_EQ(DescribeLatest({C(40, "all_reduce", -1, 2'500, 2'200), C(41, "all_gather", 3, 2'100)}, kNow),
            "in all_gather #41 (unit 3) for 2.1 s");
  EXPECT_EQ(DescribeLatest({C(40, "all_reduce", -1, 900, 300)}, kNow), "all_reduce #40 ended 0.3 s ago");
  EXPECT_EQ(DescribeLatest({}, kNow), "");
}

}  // namespace
}  // namespace shardd
