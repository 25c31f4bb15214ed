// The gateway's checks on what a worker reports about its steps. A worker is
// trusted to train, not to keep the coordinator's books: a corrupt, stale or
// hostile report must not put a negative counter on /metrics, a step past
// the end into the store, or a finite loss where the truth is NaN.
//
// Per field (docs/observability.md, "What the coordinator accepts"):
//   step          1..train.steps                       else the row is refused
//   loss          finite, unless the row is `skipped`  else the row is refused
//                 (the trainer fails a non-finite step it did not skip, so
//                 only the loss scaler's skipped steps carry inf/NaN)
//   grad_norm     as loss
//   tokens,       0..global_batch x seq_len (no global  else the row is refused
//   positions     batch holds more positions; a preference: job's batch
//                 counts pairs, two rows each: twice that)
//   seconds, lr,  finite and >= 0                       else the row is refused
//   compute_seconds (0: an older worker)
//   loss_scale    finite and >= 0 (0: an older worker)  else the row is refused
//   eval_samples  >= 0                                  else the row is refused
//   pairs         0..global_batch with preference:, else 0  else the row is refused
//   rewards_*,    finite (accuracies in 0..1) when pairs   else the row is refused
//   logps_*, nll  > 0, unless the row is `skipped`
//   eval_pairs    >= 0; 0 without preference:; else      else the row is refused
//                 = eval_samples
//   eval_rewards_*, finite (accuracies in 0..1) when      else the row is refused
//   eval_logps_*,   eval_pairs > 0
//   eval_nll
// A refused row is not stored and not counted; the heartbeat that carried it
// is still a sign of life. The token counter adds with saturation.
// Pure functions; thread-compatible.
#pragma once

#include <cstdint>

#include "shard/common/status.h"
#include "shard/spec/job_config.h"
#include "shardd/v1/worker.pb.h"

namespace shardd {

// What a job's steps can hold, from its job file.
struct StepReportLimits {
  int64_t total_steps = 0;  // train.steps
  int64_t max_tokens = 0;   // train.global_batch x data.seq_len (x 2 with preference:; saturated)
  int64_t max_pairs = 0;    // train.global_batch with preference:, else 0 (an SFT step has no pairs)
};
StepReportLimits StepReportLimitsFor(const shard::JobConfig& job);

// OK, or INVALID_ARGUMENT naming the step and the field that is out of range.
shard::Status CheckStepMetric(const v1::StepMetric& m, const StepReportLimits& limits);

// A counter plus n >= 0: never wraps (stops at INT64_MAX), never goes below 0
// (a negative total, as an older coordinator could store, counts from 0; a
// negative n adds nothing).
int64_t AddToCounter(int64_t total, int64_t n);

}  // namespace shardd
