#include "coordinator/health/health_monitor.h"

#include <algorithm>

#include "shard/common/format_number.h"

namespace shardd {
namespace {

std::string Seconds(double s) { return shard::FormatNumber("%.1f s", s); }

std::string HangReason(const std::string& who, const char* verb, double stuck_s, int64_t step, double limit_s) {
  return who + " " + verb + " alive but made no progress for " + Seconds(stuck_s) + " at step " + std::to_string(step) +
         " (hang limit " + Seconds(limit_s) + ")";
}

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
    if (stuck > hang_limit) return {HealthProblem::kHung, r.rank, HangReason(who, "is", stuck, r.step, hang_limit)};
  }
  return {};
}

HealthFinding BlameHang(const HealthFinding& found, const std::vector<RankHealth>& ranks, const HealthLimits& l,
                        int64_t now_ms, const std::vector<int>& stalled) {
  if (found.problem != HealthProblem::kHung) return found;
  std::vector<const RankHealth*> named;
  for (const RankHealth& r : ranks)
    if (r.registered && !r.done && std::find(stalled.begin(), stalled.end(), r.rank) != stalled.end())
      named.push_back(&r);
  if (named.empty()) return found;
  std::string who = named.size() == 1 ? "rank " : "ranks ";
  int64_t since = named[0]->last_progress_ms, step = named[0]->step;
  for (size_t i = 0; i < named.size(); ++i) {
    who += (i ? "," : "") + std::to_string(named[i]->rank);
    since = std::min(since, named[i]->last_progress_ms);
    step = std::min(step, named[i]->step);
  }
  const std::string reason = HangReason(who, named.size() == 1 ? "is" : "are", (now_ms - since) / 1000.0, step,
                                        HangLimitSeconds(l)) +
                             "; the other ranks wait for " + (named.size() == 1 ? "it" : "them") + " in a collective";
  return {HealthProblem::kHung, named[0]->rank, reason};
}

}  // namespace shardd
