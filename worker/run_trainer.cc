#include "worker/run_trainer.h"

namespace shardd {

shard::Status RunTrainer(const shard::JobConfig& job, const shard::DistContext& rank, const TrainerHooks& hooks,
                         TrainOutcome* out) {
  *out = TrainOutcome{};
  ASSIGN_OR_RETURN(std::unique_ptr<shard::Trainer> trainer, shard::Trainer::Create(job, rank));
  out->built = true;
  shard::Status st = trainer->Run([&](const shard::StepMetrics& m) {
    if (out->first_loss < 0) out->first_loss = m.loss;
    out->last_loss = m.loss;
    if (hooks.on_step) hooks.on_step(m);
  });
  out->step = trainer->step();
  out->stopped = trainer->stopped();
  return st;
}

}  // namespace shardd
