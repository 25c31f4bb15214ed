// Decides whether an attempt's ranks are healthy: pure arithmetic over what
// the JobManager last heard from each rank, so every rule is unit-tested with
// a fake clock.
//
// Rules, first match wins:
//   * launched but not registered within register_timeout_s;
//   * registered, and no heartbeat for heartbeat_timeout_s (a dead or frozen process);
//   * heartbeating but no step finished for the hang limit: hang_timeout_s, or
//     once step times are known min(hang_timeout_s, max(20 x the recent step
//     time, 30 s)) — alive but stuck (a deadlocked collective, a hung disk).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardd {

struct RankHealth {
  int rank = 0;
  bool registered = false;
  bool done = false;
  int64_t launched_ms = 0;
  int64_t last_heartbeat_ms = 0;
  int64_t last_progress_ms = 0;  // when its step last advanced (or it registered)
  int64_t step = 0;
};

struct HealthLimits {
  double register_timeout_s = 120;
  double heartbeat_timeout_s = 10;
  double hang_timeout_s = 300;
  double recent_step_s = 0;  // 0: unknown yet
};

// The hang limit in seconds for the given limits (see the rules above).
double HangLimitSeconds(const HealthLimits& limits);

// What the first bad rank's rule found.
enum class HealthProblem { kNone, kNotRegistered, kSilent, kHung };
struct HealthFinding {
  HealthProblem problem = HealthProblem::kNone;
  int rank = -1;
  std::string reason;  // "" for kNone
};
HealthFinding FindHealthProblem(const std::vector<RankHealth>& ranks, const HealthLimits& limits, int64_t now_ms);

// A kHung finding names the first rank checked, but every rank of a group
// stuck in a collective stops making progress: restated for `stalled` (the
// ranks the others wait for, from the flight recorder's diagnosis) with their
// own progress. `found` as is when it is not kHung or `stalled` names no
// registered, unfinished rank.
HealthFinding BlameHang(const HealthFinding& found, const std::vector<RankHealth>& ranks, const HealthLimits& limits,
                        int64_t now_ms, const std::vector<int>& stalled);

// "" when every rank is healthy, otherwise the reason naming the first bad rank.
std::string CheckHealth(const std::vector<RankHealth>& ranks, const HealthLimits& limits, int64_t now_ms);

}  // namespace shardd
