// The one place a worker runs the training loop, in both of its modes
// (--standalone and under a coordinator): build the Trainer for this rank,
// run the remaining steps with the mode's per-step hook, and say how it ended.
// The modes differ only in what they do around it (where the job and the
// rendezvous come from, who is told about steps, checkpoints and the end).
//
// Thread-safety: RunTrainer blocks its caller; hooks run on that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "shard/common/status.h"
#include "shard/train/trainer.h"

namespace shardd {

struct TrainerHooks {
  std::function<void(const shard::StepMetrics&)> on_step;  // after every step (may be empty)
  std::function<void(const shard::Trainer&)> on_built;     // once, before the first step (may be empty)
};

struct TrainOutcome {
  bool built = false;      // the Trainer was built (an error before: the job can never run here as written)
  int64_t step = 0;        // the step the run ended at
  bool stopped = false;    // stopped on a signal after checkpointing this step
  double first_loss = -1;  // of this run's first and last steps (-1: none ran)
  double last_loss = -1;
  // The run resumed at or past train.steps: nothing was trained (said as such).
  bool nothing_trained = false;
  int64_t total_steps = 0;   // train.steps
  std::string resumed_from;  // the checkpoint step it resumed from ("" = none)
};

// `rank` carries the rank, world, rendezvous store and prefix, and (under a
// coordinator) where checkpoints are reported. A Trainer that cannot be built
// and a failed run are both errors (out->built tells them apart); stopping on
// a signal is not.
shard::Status RunTrainer(const shard::JobConfig& job, const shard::DistContext& rank, const TrainerHooks& hooks,
                         TrainOutcome* out);

}  // namespace shardd
