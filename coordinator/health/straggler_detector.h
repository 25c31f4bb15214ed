// Names the ranks that compute slower than the rest of their attempt: pure
// arithmetic over each rank's compute seconds per step (its step time minus
// its time waiting in collectives, StepMetrics::compute_seconds), so every
// rule is unit-tested without a clock or a network.
//
// Rules (job file health:, shard/spec/health_config.h):
//   * windows end at the newest step every rank has reported, and are judged
//     once each step: a window is the last `window` steps, all of them
//     reported by every rank (a gap waits for a later window);
//   * a rank's figure is its mean compute per step over the window; it is a
//     straggler when that exceeds `ratio` x the median of the OTHER ranks'
//     figures (so one slow rank of two is still measured against a healthy
//     one); a one-rank attempt has no others and never flags;
//   * it stops being one when its figure falls to or below 1 + (ratio - 1) / 2
//     times that median (for 1.5: 1.25): a rank hovering at the threshold is
//     not announced again at every step.
// Evaluate returns only changes, so each episode is one event and each
// recovery one more.
//
// Cost: Observe is O(log window); Evaluate O(world x window + world log world)
// once per new frontier step — small enough to run under the job table's lock
// on the heartbeat path. Memory: at most kMaxStepsPerRank steps per rank.
// Thread-compatible: the caller (the worker gateway, under the table lock)
// serialises calls.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardd {

struct StragglerOptions {
  double ratio = 1.5;
  int window = 20;
};

// A rank that became a straggler or stopped being one.
struct StragglerChange {
  int rank = 0;
  bool straggler = false;     // the new state
  double compute_s = 0;       // its mean compute per step over the window
  double median_s = 0;        // the median of the other ranks' means
  int64_t first_step = 0, last_step = 0;  // the window
};

class StragglerDetector {
 public:
  // Steps kept per rank while it runs ahead of the slowest reporter.
  static constexpr size_t kMaxStepsPerRank = 4096;

  StragglerDetector() = default;
  StragglerDetector(int world, StragglerOptions opts) { Reset(world, opts); }
  // Forgets everything (a new attempt).
  void Reset(int world, StragglerOptions opts);

  // Rank `rank`'s compute seconds in step `step`. A step already given is
  // replaced (a resent heartbeat); out-of-range ranks, steps < 1 and
  // non-finite or negative seconds are ignored.
  void Observe(int rank, int64_t step, double compute_s);
  // Judges the newest complete window, if it is newer than the last one
  // judged; returns the ranks whose state changed, in rank order.
  std::vector<StragglerChange> Evaluate();

  int world() const { return static_cast<int>(ranks_.size()); }
  bool straggler(int rank) const { return rank >= 0 && rank < world() && ranks_[rank].straggler; }
  // Its mean compute per step over the last window judged; -1 before the first.
  double compute_seconds(int rank) const { return rank >= 0 && rank < world() ? ranks_[rank].mean_s : -1; }

  // "rank 1 is a straggler: 0.41 s of compute per step vs 0.17 s median of
  // the other ranks (steps 1-20)", or "rank 1 is no longer a straggler: ...".
  static std::string Describe(const StragglerChange& c);

 private:
  struct Rank {
    std::map<int64_t, double> steps;  // step -> compute seconds
    int64_t newest = 0;
    double mean_s = -1;
    bool straggler = false;
  };
  StragglerOptions opts_;
  std::vector<Rank> ranks_;
  int64_t judged_ = 0;  // the last window's end step
};

// health.straggler_action: restart — what the coordinator does about one
// judgement's changes. A rank that became a straggler restarts the attempt
// (a fresh process often cures a sick one) while restart.max_restarts has
// budget left; once it is spent the job keeps training with the straggler
// (a slow job still finishes) and says so once.
struct StragglerDecision {
  bool restart = false;
  std::string message;  // the restart's reason, or why none; "" = nothing to say
};
StragglerDecision DecideStragglerAction(const std::vector<StragglerChange>& changes, bool restart_action,
                                        int restarts, int max_restarts);

}  // namespace shardd
