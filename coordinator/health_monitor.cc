#include "coordinator/health_monitor.h"

#include <algorithm>

#include "shard/common/format_number.h"

namespace shardd {
namespace {

std::string Seconds(double s) { return shard::FormatNumber("%.1f s", s); }

}  // namespace

double HangLimitSeconds(const HealthLimits& l) {
  if (l.recent_step_s <= 0) return l.hang_timeout_s;
  return std::min(l.hang_timeout_s, std::max(20.0 * l.recent_step_s, 30.0));
}

std::string CheckHealth(const std::vector<RankHealth>& ranks, const HealthLimits& l, int64_t now_ms) {
  return FindHealthProblem(ranks, l, now_ms).reason;
}

HealthFinding FindHealthProblem(const std::vector<RankHealth>& ranks, const HealthLimits& l, int64_t now_ms) {
  const double hang_limit = HangLimitSeconds(l);
  for (const RankHealth& r : ranks) {
    if (r.done) continue;
    const std::string who = "rank " + std::to_string(r.rank);
    if (!r.registered) {
      double waited = (now_ms - r.launched_ms) / 1000.0;
      if (waited > l.register_timeout_s)
        return {HealthProblem::kNotRegistered, r.rank,
                who + " did not register within " + Seconds(l.register_timeout_s) + " of its launch"};
      continue;
    }
    double silent = (now_ms - r.last_heartbeat_ms) / 1000.0;
    if (silent > l.heartbeat_timeout_s)
      return {HealthProblem::kSilent, r.rank,
              who + " missed its heartbeat deadline: silent for " + Seconds(silent) + " (limit " +
                  Seconds(l.heartbeat_timeout_s) + ")"};
    double stuck = (now_ms - r.last_progress_ms) / 1000.0;
    if (stuck > hang_limit)
      return {HealthProblem::kHung, r.rank,
              who + " is alive but made no progress for " + Seconds(stuck) + " at step " + std::to_string(r.step) +
                  " (hang limit " + Seconds(hang_limit) + ")"};
  }
  return {};
}

}  // namespace shardd
