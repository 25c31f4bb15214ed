// The trainer's held-out evaluation (job file eval:, shard/spec/eval_config.h):
// rank 0 prepares eval.data like data.jsonl, then every eval.every_steps
// steps all ranks score it together through the sharded weights, as the
// job's objective says (Objective::Evaluate: EvaluateSft with rank/world in
// objective.cc; a preference: job's pairs through ScorePairs against the
// stored reference in preference_training.cc) and add their sums with one
// all-reduce. Under peft: both score the adapted model (the frozen base plus
// the adapters as trained, without dropout).
#include <chrono>
#include <filesystem>

#include "shard/common/logging.h"
#include "shard/data/prepare_sft.h"
#include "shard/train/trainer.h"

namespace shard {

std::string EvalPreparedPrefix(const JobConfig& job) {
  return (std::filesystem::path(CheckpointJobDir(job)) / "data" / "eval").string();
}

Status Trainer::PrepareEvalData() {
  if (!job_.eval.enabled()) return OkStatus();
  PrepareSftOptions po = SftPrepareOptions(job_);
  po.input = job_.eval.data;
  po.out = EvalPreparedPrefix(job_);
  Status mine = OkStatus();
  if (dist_.rank == 0) mine = EnsurePrepared(po).status();
  double failed = mine.ok() ? 0.0 : 1.0;  // a barrier carrying rank 0's outcome
  RETURN_IF_ERROR(runtime_->AllReduceSum(&failed, 1));
  if (!mine.ok()) return mine.WithContext("preparing eval.data " + po.input + " into " + po.out);
  if (failed != 0) return FailedPrecondition("rank 0 could not prepare eval.data " + po.input + " (its log says why)");
  auto data = PreparedDataset::Open(po.out);
  if (!data.ok()) return data.status().WithContext("eval.data " + po.input + " prepared as " + po.out);
  // Pairs evaluate only a preference: job, and a preference: job only pairs.
  if (data->header().pairs != job_.preference.enabled())
    return InvalidArgument("eval.data " + po.input +
                           (job_.preference.enabled()
                                ? " holds SFT samples; a preference: job evaluates on held-out pairs (prompt, chosen, "
                                  "rejected)"
                                : " holds preference pairs (prompt, chosen, rejected); an SFT job evaluates on SFT "
                                  "samples"));
  if (job_.preference.enabled())
    RETURN_IF_ERROR(data->CheckVocab(model_->config().vocab_size).WithContext("eval.data " + po.input));
  eval_data_ = std::make_unique<PreparedDataset>(std::move(*data));
  return OkStatus();
}

bool Trainer::EvalDue(int64_t step) const {
  if (!eval_data_) return false;
  const int64_t every = job_.eval.every_steps;
  return step == job_.train.steps || (every > 0 && step % every == 0);
}

}  // namespace shard
