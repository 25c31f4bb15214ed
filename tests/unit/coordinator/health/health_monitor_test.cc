// The health rules as pure arithmetic: each rule fires just past its limit
// and not at it, done ranks are never judged, the first bad rank is named, and
// the hang limit follows min(hang_timeout_s, max(20 x step time, 30 s)).
#include "coordinator/health/health_monitor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardd {
namespace {

constexpr int64_t kT0 = 1'000'000;

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

HealthLimits Limits() {
  HealthLimits l;
  l.register_timeout_s = 60;
  l.heartbeat_timeout_s = 10;
  l.hang_timeout_s = 300;
  return l;
}

// A registered rank that heartbeat and progressed at kT0.
RankHealth Healthy(int rank) {
  RankHealth r;
  r.rank = rank;
  r.registered = true;
  r.launched_ms = kT0;
  r.last_heartbeat_ms = kT0;
  r.last_progress_ms = kT0;
  r.step = 7;
  return r;
}

int64_t At(double seconds) { return kT0 + static_cast<int64_t>(seconds * 1000); }

TEST(HangLimitTest, FollowsTheStepTimeWithinBounds) {
  HealthLimits l = Limits();
  EXPECT_DOUBLE_EQ(HangLimitSeconds(l), 300);  // step time unknown
  l.recent_step_s = 0.5;
  EXPECT_DOUBLE_EQ(HangLimitSeconds(l), 30);   // 20 x 0.5 = 10, floored at 30
  l.recent_step_s = 5;
  EXPECT_DOUBLE_EQ(HangLimitSeconds(l), 100);  // 20 x 5
  l.recent_step_s = 100;
  EXPECT_DOUBLE_EQ(HangLimitSeconds(l), 300);  // capped by hang_timeout_s
  l.hang_timeout_s = 20;
  l.recent_step_s = 0.1;
  EXPECT_DOUBLE_EQ(HangLimitSeconds(l), 20);   // a limit below 30 s is honoured
  l.recent_step_s = -1;
  EXPECT_DOUBLE_EQ(HangLimitSeconds(l), 20);
}

TEST(HealthMonitorTest, HealthyRanksAndNoRanksAreFine) {
  EXPECT_EQ(CheckHealth({Healthy(0), Healthy(1)}, Limits(), At(5)), "");
  EXPECT_EQ(CheckHealth({}, Limits(), At(1e6)), "");
}

TEST(HealthMonitorTest, RankNotRegisteredWithinTheTimeout) {
  RankHealth r = Healthy(1);
  r.registered = false;
  r.last_heartbeat_ms = 0;  // never heard from: only the launch time counts
  r.last_progress_ms = 0;
  RankHealth r0 = Healthy(0);  // heartbeating all along
  r0.last_heartbeat_ms = r0.last_progress_ms = At(60);
  EXPECT_EQ(CheckHealth({r0, r}, Limits(), At(60)), "");
  const std::string bad = CheckHealth({r0, r}, Limits(), At(60.001));
  EXPECT_TRUE(Has(bad, "rank 1 did not register within 60.0 s")) << bad;
}

TEST(HealthMonitorTest, SilentRankMissesItsHeartbeatDeadline) {
  EXPECT_EQ(CheckHealth({Healthy(0)}, Limits(), At(10)), "");
  const std::string bad = CheckHealth({Healthy(0)}, Limits(), At(12.5));
  EXPECT_TRUE(Has(bad, "rank 0 missed its heartbeat deadline")) << bad;
  EXPECT_TRUE(Has(bad, "silent for 12.5 s")) << bad;
  EXPECT_TRUE(Has(bad, "limit 10.0 s")) << bad;
}

TEST(HealthMonitorTest, HeartbeatingRankWithoutProgressIsHung) {
  HealthLimits l = Limits();
  l.hang_timeout_s = 60;
  RankHealth r = Healthy(2);
  r.last_heartbeat_ms = At(60);
  EXPECT_EQ(CheckHealth({r}, l, At(60)), "");
  r.last_heartbeat_ms = At(61);
  const std::string bad = CheckHealth({r}, l, At(61));
  EXPECT_TRUE(Has(bad, "rank 2 is alive but made no progress for 61.0 s at step 7")) << bad;
  EXPECT_TRUE(Has(bad, "hang limit 60.0 s")) << bad;

  // Known step times shorten it: 20 x 2 s = 40 s.
  l.recent_step_s = 2;
  r.last_heartbeat_ms = At(41);
  EXPECT_TRUE(Has(CheckHealth({r}, l, At(41)), "hang limit 40.0 s"));
  r.last_heartbeat_ms = At(40);
  EXPECT_EQ(CheckHealth({r}, l, At(40)), "");
}

TEST(HealthMonitorTest, SilenceIsReportedBeforeAHang) {
  HealthLimits l = Limits();
  l.hang_timeout_s = 5;
  const std::string bad = CheckHealth({Healthy(0)}, l, At(11));
  EXPECT_TRUE(Has(bad, "heartbeat deadline")) << bad;
}

TEST(HealthMonitorTest, DoneRanksAreNeverJudged) {
  RankHealth done = Healthy(0);
  done.done = true;
  RankHealth unregistered_done = Healthy(1);
  unregistered_done.registered = false;
  unregistered_done.done = true;
  EXPECT_EQ(CheckHealth({done, unregistered_done}, Limits(), At(1e5)), "");
}

TEST(HealthMonitorTest, TheFirstBadRankIsNamed) {
  RankHealth r0 = Healthy(0);
  r0.last_heartbeat_ms = At(100);
  r0.last_progress_ms = At(100);
  RankHealth r1 = Healthy(1);  // silent since kT0
  RankHealth r2 = Healthy(2);  // silent since kT0 too
  const std::string bad = CheckHealth({r0, r1, r2}, Limits(), At(100));
  EXPECT_TRUE(Has(bad, "rank 1 ")) << bad;
  EXPECT_FALSE(Has(bad, "rank 2")) << bad;
}

TEST(HealthMonitorTest, AHangIsBlamedOnTheRanksTheOthersWaitFor) {
  HealthLimits l = Limits();
  l.hang_timeout_s = 60;
  std::vector<RankHealth> ranks = {Healthy(0), Healthy(1), Healthy(2)};
  for (RankHealth& r : ranks) r.last_heartbeat_ms = At(70);
  ranks[1].last_progress_ms = At(-2);  // its last step ended a little earlier
  ranks[1].step = 6;
  const HealthFinding first = FindHealthProblem(ranks, l, At(70));
  ASSERT_EQ(first.problem, HealthProblem::kHung);
  EXPECT_EQ(first.rank, 0) << "the first rank checked";

  const HealthFinding blamed = BlameHang(first, ranks, l, At(70), {1});
  EXPECT_EQ(blamed.rank, 1);
  EXPECT_EQ(blamed.reason,
            "rank 1 is alive but made no progress for 72.0 s at step 6 (hang limit 60.0 s); the other ranks wait "
            "for it in a collective");
  EXPECT_EQ(BlameHang(first, ranks, l, At(70), {1, 2}).reason.rfind("ranks 1,2 are alive but made no progress for "
                                                                    "72.0 s at step 6",
                                                                    0),
            0u);
  EXPECT_EQ(BlameHang(first, ranks, l, At(70), {}).reason, first.reason) << "no diagnosis: as found";
  ranks[1].done = true;
  EXPECT_EQ(BlameHang(first, ranks, l, At(70), {1}).reason, first.reason) << "a finished rank is not blamed";
  const HealthFinding silent{HealthProblem::kSilent, 0, "rank 0 missed its heartbeat deadline"};
  EXPECT_EQ(BlameHang(silent, ranks, l, At(70), {2}).reason, silent.reason) << "only a hang is restated";
}

}  // namespace
}  // namespace shardd
