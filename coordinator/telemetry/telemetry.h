// What the coordinator exports about jobs beyond their status: cumulative
// Prometheus histograms (step time, checkpoint commit duration) and counters
// kept in memory while the coordinator runs (they restart from zero with it,
// as Prometheus counters may).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardd/v1/job.pb.h"

namespace shardd {

// A cumulative histogram with fixed upper bounds (the +Inf bucket is implied).
struct Histogram {
  std::vector<double> bounds;    // increasing upper bounds (seconds)
  std::vector<uint64_t> counts;  // per bound, NOT cumulative; counts.size() == bounds.size() + 1
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void Observe(double v) {
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
    ++count;
  }
};

// Step times from sub-millisecond CPU toy steps to minutes-long 70B steps.
inline std::vector<double> StepTimeBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}
// Checkpoint commits: first rank's report to COMMITTED written.
inline std::vector<double> CommitBuckets() { return {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900}; }

struct JobTelemetry {
  v1::JobStatus status;
  Histogram step_seconds{StepTimeBuckets()};
  Histogram checkpoint_commit_seconds{CommitBuckets()};
  int64_t checkpoints_committed = 0;  // since this coordinator started
};

}  // namespace shardd
