#include "worker/run_trainer.h"

namespace shardd {

shard::Status RunTrainer(const shard::JobConfig& job, const shard::DistContext& rank, const TrainerHooks& hooks,
                         TrainOutcome* out) {
  *out = TrainOutcome{};
  ASSIGN_OR_RETURN(std::unique_ptr<shard::Trainer> trainer, shard::Trainer::Create(job, rank));
  out->built = true;
  if (hooks.on_built) hooks.on_built(*trainer);
  shard::Status st = trainer->Run([&](const shard::StepMetrics& m) {
    if (out->first_loss < 0) out->first_loss = m.loss;
    out->last_loss = m.loss;
    if (hooks.on_step) hooks.on_step(m);
  });
  out->step = trainer->step();
  out->stopped = trainer->stopped();
  out->nothing_trained = trainer->nothing_trained();
  out->total_steps = trainer->total_steps();
  out->resumed_from = trainer->resumed_from();
  return st;
}

}  // namespace shardd
