#include "coordinator/health/straggler_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace shardd {
namespace {

// The median of `sorted` without one element equal to `value` (present).
double MedianWithout(const std::vector<double>& sorted, double value) {
  const size_t skip = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
  const size_t n = sorted.size() - 1;  // the others
  auto at = [&](size_t k) { return sorted[k < skip ? k : k + 1]; };
  return n % 2 == 1 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s >= 10 ? "%.0f s" : "%.2g s", s);
  return buf;
}

}  // namespace

void StragglerDetector::Reset(int world, StragglerOptions opts) {
  opts_ = opts;
  ranks_.assign(std::max(0, world), Rank{});
  judged_ = 0;
}

void StragglerDetector::Observe(int rank, int64_t step, double compute_s) {
  if (rank < 0 || rank >= world() || step < 1 || !std::isfinite(compute_s) || compute_s < 0) return;
  if (step <= judged_ - opts_.window + 1) return;  // in no window still to be judged
  Rank& r = ranks_[rank];
  r.steps[step] = compute_s;
  r.newest = std::max(r.newest, step);
  while (r.steps.size() > kMaxStepsPerRank) r.steps.erase(r.steps.begin());
}

std::vector<StragglerChange> StragglerDetector::Evaluate() {
  std::vector<StragglerChange> changes;
  if (world() < 2 || opts_.window < 1) return changes;
  int64_t end = ranks_[0].newest;
  for (const Rank& r : ranks_) end = std::min(end, r.newest);
  const int64_t first = end - opts_.window + 1;
  if (end <= judged_ || first < 1) return changes;
  std::vector<double> means(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const auto& steps = ranks_[i].steps;
    double sum = 0;
    int64_t n = 0;
    for (auto it = steps.lower_bound(first); it != steps.end() && it->first <= end; ++it, ++n) sum += it->second;
    if (n < opts_.window) return changes;  // a gap: wait for a window every rank reported whole
    means[i] = sum / static_cast<double>(n);
  }
  judged_ = end;
  std::vector<double> sorted = means;
  std::sort(sorted.begin(), sorted.end());
  const double clear_ratio = 1 + (opts_.ratio - 1) / 2;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    r.mean_s = means[i];
    const double median = MedianWithout(sorted, means[i]);
    // Others that computed nothing measurable give no scale to judge by.
    if (!(median > 0)) continue;
    const bool now = r.straggler ? means[i] > clear_ratio * median : means[i] > opts_.ratio * median;
    if (now != r.straggler) {
      r.straggler = now;
      changes.push_back({static_cast<int>(i), now, means[i], median, first, end});
    }
  }
  // What no later window can reach.
  for (Rank& r : ranks_) r.steps.erase(r.steps.begin(), r.steps.upper_bound(end - opts_.window + 1));
  return changes;
}

std::string StragglerDetector::Describe(const StragglerChange& c) {
  return "rank " + std::to_string(c.rank) + (c.straggler ? " is a straggler: " : " is no longer a straggler: ") +
         Seconds(c.compute_s) + " of compute per step vs " + Seconds(c.median_s) +
         " median of the other ranks (steps " + std::to_string(c.first_step) + "-" + std::to_string(c.last_step) +
         ")";
}

StragglerDecision DecideStragglerAction(const std::vector<StragglerChange>& changes, bool restart_action,
                                        int restarts, int max_restarts) {
  StragglerDecision d;
  if (!restart_action) return d;
  const auto it = std::find_if(changes.begin(), changes.end(), [](const StragglerChange& c) { return c.straggler; });
  if (it == changes.end()) return d;
  if (restarts >= max_restarts) {
    d.message = StragglerDetector::Describe(*it) +
                "; health.straggler_action: restart is not taken: restart.max_restarts (" +
                std::to_string(max_restarts) + ") is spent, so the job trains on with it";
    return d;
  }
  d.restart = true;
  d.message = StragglerDetector::Describe(*it) + "; health.straggler_action: restart restarts the attempt";
  return d;
}

}  // namespace shardd
