// Straggler detection as pure arithmetic: a rank is measured against the
// median of the OTHER ranks over a whole window every rank reported; one
// change is reported per episode (and one per recovery); a rank near the
// threshold does not flap; a one-rank attempt never flags; gaps and resent
// steps do not skew a window.
#include "coordinator/health/straggler_detector.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace shardd {
namespace {

// Steps [from, to] with each rank's compute seconds per step.
void Feed(StragglerDetector& d, int64_t from, int64_t to, const std::vector<double>& per_rank) {
  for (int64_t s = from; s <= to; ++s)
    for (size_t r = 0; r < per_rank.size(); ++r) d.Observe(static_cast<int>(r), s, per_rank[r]);
}

// Feeds one step at a time and evaluates after each, as heartbeats would;
// returns every change seen.
std::vector<StragglerChange> Steps(StragglerDetector& d, int64_t from, int64_t to, const std::vector<double>& per_rank) {
  std::vector<StragglerChange> all;
  for (int64_t s = from; s <= to; ++s) {
    Feed(d, s, s, per_rank);
    for (const StragglerChange& c : d.Evaluate()) all.push_back(c);
  }
  return all;
}

TEST(StragglerDetectorTest, ASlowRankIsNamedOnceAtTheFirstFullWindow) {
  StragglerDetector d(3, {1.5, 20});
  // Rank 1 at ~40% speed: 2.4x the others' compute.
  auto changes = Steps(d, 1, 19, {0.17, 0.41, 0.17});
  EXPECT_TRUE(changes.empty()) << "no window is complete before step 20";
  changes = Steps(d, 20, 60, {0.17, 0.41, 0.17});
  ASSERT_EQ(changes.size(), 1u) << "one event per episode, not one per window";
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_TRUE(changes[0].straggler);
  EXPECT_EQ(changes[0].first_step, 1);
  EXPECT_EQ(changes[0].last_step, 20);
  EXPECT_NEAR(changes[0].compute_s, 0.41, 1e-9);
  EXPECT_NEAR(changes[0].median_s, 0.17, 1e-9);
  EXPECT_TRUE(d.straggler(1));
  EXPECT_FALSE(d.straggler(0));
  EXPECT_FALSE(d.straggler(2));
  EXPECT_EQ(StragglerDetector::Describe(changes[0]),
            "rank 1 is a straggler: 0.41 s of compute per step vs 0.17 s median of the other ranks (steps 1-20)");
}

TEST(StragglerDetectorTest, TheMedianIsOfTheOtherRanks) {
  // Two ranks: with the median of all (itself included) the slow rank would
  // sit at 1.4x the midpoint of 0.1 and 0.25 and pass unnoticed.
  StragglerDetector d(2, {1.5, 5});
  auto changes = Steps(d, 1, 5, {0.1, 0.25});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_NEAR(changes[0].median_s, 0.1, 1e-12);
  // Four ranks, two slow ones: the median of each slow rank's others
  // (0.1, 0.1, 0.3) is 0.1, so both are named; a fast rank's is 0.3.
  StragglerDetector e(4, {1.5, 5});
  changes = Steps(e, 1, 5, {0.1, 0.3, 0.1, 0.3});
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_EQ(changes[1].rank, 3);
}

TEST(StragglerDetectorTest, TheRatioIsAStrictThreshold) {
  // Binary fractions: the means are exact.
  StragglerDetector at(3, {1.5, 4});
  EXPECT_TRUE(Steps(at, 1, 8, {0.25, 0.375, 0.25}).empty()) << "exactly 1.5x is not more than 1.5x";
  StragglerDetector past(3, {1.5, 4});
  EXPECT_EQ(Steps(past, 1, 8, {0.25, 0.390625, 0.25}).size(), 1u);
  StragglerDetector lenient(3, {3, 4});
  EXPECT_TRUE(Steps(lenient, 1, 8, {0.25, 0.625, 0.25}).empty()) << "2.5x under a ratio of 3";
}

TEST(StragglerDetectorTest, TheWindowAveragesOutASingleSlowStep) {
  StragglerDetector d(3, {1.5, 10});
  Steps(d, 1, 10, {0.1, 0.1, 0.1});
  // One step at 4x in a window of 10 raises the mean to 1.3x.
  auto changes = Steps(d, 11, 11, {0.1, 0.4, 0.1});
  changes = Steps(d, 12, 30, {0.1, 0.1, 0.1});
  EXPECT_TRUE(changes.empty());
  EXPECT_FALSE(d.straggler(1));
  // Slowed for good, it is named once the window's mean passes 1.5x: within
  // the window (here after 6 slow steps: (4 x 0.1 + 6 x 0.2) / 10 = 0.16).
  std::vector<StragglerChange> all;
  for (int64_t s = 31; s <= 40 && all.empty(); ++s) {
    Feed(d, s, s, {0.1, 0.2, 0.1});
    all = d.Evaluate();
    if (!all.empty()) EXPECT_EQ(s, 36);
  }
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].rank, 1);
}

TEST(StragglerDetectorTest, RecoveryClearsTheFlagOnceAndANewEpisodeIsNamedAgain) {
  StragglerDetector d(3, {1.5, 5});
  ASSERT_EQ(Steps(d, 1, 10, {0.1, 0.3, 0.1}).size(), 1u);
  auto changes = Steps(d, 11, 30, {0.1, 0.1, 0.1});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_FALSE(changes[0].straggler);
  EXPECT_FALSE(d.straggler(1));
  EXPECT_EQ(StragglerDetector::Describe(changes[0]).rfind("rank 1 is no longer a straggler: ", 0), 0u);
  changes = Steps(d, 31, 40, {0.1, 0.3, 0.1});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].straggler);
}

TEST(StragglerDetectorTest, ARankAtTheThresholdDoesNotFlap) {
  StragglerDetector d(3, {1.5, 2});
  ASSERT_EQ(Steps(d, 1, 2, {0.1, 0.16, 0.1}).size(), 1u);
  // Hovering between 1.3x and 1.6x: flagged, and stays so until it is back
  // to 1.25x or less.
  std::vector<StragglerChange> all;
  for (int64_t s = 3; s <= 40; ++s) {
    Feed(d, s, s, {0.1, s % 2 ? 0.13 : 0.16, 0.1});
    for (const auto& c : d.Evaluate()) all.push_back(c);
  }
  EXPECT_TRUE(all.empty());
  EXPECT_TRUE(d.straggler(1));
  EXPECT_EQ(Steps(d, 41, 42, {0.1, 0.12, 0.1}).size(), 1u);
}

TEST(StragglerDetectorTest, AOneRankJobNeverFlags) {
  StragglerDetector d(1, {1.5, 1});
  EXPECT_TRUE(Steps(d, 1, 50, {5.0}).empty());
  EXPECT_FALSE(d.straggler(0));
}

TEST(StragglerDetectorTest, WindowsWaitForEveryRankAndForGaps) {
  StragglerDetector d(3, {1.5, 5});
  auto rank = [&](int r, int64_t from, int64_t to, double v) {
    for (int64_t s = from; s <= to; ++s) d.Observe(r, s, v);
  };
  // Ranks 0 and 1 report 10 steps, rank 2 only 4: no window yet.
  rank(0, 1, 10, 0.1);
  rank(1, 1, 10, 0.3);
  rank(2, 1, 4, 0.1);
  EXPECT_TRUE(d.Evaluate().empty());
  EXPECT_LT(d.compute_seconds(1), 0) << "nothing judged yet";
  // Rank 2's step 5 is lost, 6..7 arrive: the window 3..7 has a gap.
  rank(2, 6, 7, 0.1);
  EXPECT_TRUE(d.Evaluate().empty());
  // The heartbeat is resent with step 5: the window 3..7 is judged.
  rank(2, 5, 5, 0.1);
  auto changes = d.Evaluate();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_EQ(changes[0].first_step, 3);
  EXPECT_EQ(changes[0].last_step, 7);
  EXPECT_NEAR(d.compute_seconds(1), 0.3, 1e-12);
  EXPECT_TRUE(d.Evaluate().empty()) << "a window is judged once";
}

TEST(StragglerDetectorTest, ResentStepsReplaceAndBadValuesAreIgnored) {
  StragglerDetector d(2, {1.5, 3});
  Feed(d, 1, 3, {0.1, 0.1});
  for (int64_t s = 1; s <= 3; ++s) d.Observe(1, s, 0.1);  // a resent heartbeat: same steps again
  d.Observe(1, 2, -1);
  d.Observe(1, 3, std::nan(""));
  d.Observe(7, 3, 9.0);
  d.Observe(0, 0, 9.0);
  EXPECT_TRUE(d.Evaluate().empty());
  EXPECT_NEAR(d.compute_seconds(1), 0.1, 1e-12);
}

TEST(StragglerDetectorTest, ResetStartsANewAttempt) {
  StragglerDetector d(3, {1.5, 3});
  ASSERT_EQ(Steps(d, 1, 3, {0.1, 0.3, 0.1}).size(), 1u);
  d.Reset(3, {1.5, 3});
  EXPECT_FALSE(d.straggler(1));
  // The new attempt resumes at step 31: its windows start there.
  auto changes = Steps(d, 31, 33, {0.1, 0.3, 0.1});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].first_step, 31);
}

TEST(StragglerDetectorTest, ARankRunningAheadKeepsBoundedMemory) {
  StragglerDetector d(2, {1.5, 3});
  for (int64_t s = 1; s <= 100000; ++s) d.Observe(0, s, 0.1);  // rank 1 never reports
  EXPECT_TRUE(d.Evaluate().empty());
  // Rank 1 catches up on the newest steps only: judged over what both kept.
  Feed(d, 99998, 100000, {0.1, 0.1});
  EXPECT_TRUE(d.Evaluate().empty());
  EXPECT_NEAR(d.compute_seconds(0), 0.1, 1e-12);
}

}  // namespace
}  // namespace shardd
