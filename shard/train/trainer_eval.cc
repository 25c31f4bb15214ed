// The trainer's held-out evaluation (job file eval:, shard/spec/eval_config.h):
// rank 0 prepares eval.data like data.jsonl, then every eval.every_steps
// steps all ranks score it together through the sharded weights
// (EvaluateSft with rank/world; a preference: job's pairs through
// ScorePairs, against the reference stored by PrepareReference) and add
// their sums with one all-reduce. Under peft: both score the adapted model
// (the frozen base plus the adapters as trained, without dropout).
#include <chrono>
#include <filesystem>

#include "shard/common/logging.h"
#include "shard/data/prepare_sft.h"
#include "shard/spec/step_metric_fields.h"
#include "shard/train/pair_scoring.h"
#include "shard/train/sft_eval.h"
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

Status Trainer::Evaluate(StepMetrics* m) {
  if (preference_) return EvaluatePairs(m);
  const auto t0 = std::chrono::steady_clock::now();
  SftEvalOptions o;
  o.seq_len = job_.data.seq_len;
  o.batch = job_.train.micro_batch;
  o.max_samples = job_.eval.max_samples;
  o.exact_match = job_.eval.exact_match;
  o.rank = dist_.rank;
  o.world = dist_.world;
  o.lora = lora() ? lora()->binding() : nullptr;  // peft: the base plus the adapters as trained
  runtime_->BeginMicroBatch();  // a pass outside the recorded training order
  ASSIGN_OR_RETURN(SftEvalResult r, EvaluateSft(model_->config(), backend_.get(), *runtime_, *eval_data_, o));
  RETURN_IF_ERROR(runtime_->FinishMicroBatch());  // frees what the pass left gathered
  double sums[5] = {r.loss_sum, static_cast<double>(r.target_tokens), static_cast<double>(r.samples),
                    static_cast<double>(r.scored), static_cast<double>(r.exact)};
  RETURN_IF_ERROR(runtime_->AllReduceSum(sums, 5));
  m->eval_samples = static_cast<int64_t>(sums[2]);
  m->eval_loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  m->eval_exact_match = job_.eval.exact_match ? (sums[3] > 0 ? sums[4] / sums[3] : 0.0) : -1.0;
  if (dist_.rank == 0) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    LOG_INFO("eval step {}: loss {:.4f} over {} samples ({} target tokens){} in {:.2f} s", m->step, m->eval_loss,
             m->eval_samples, static_cast<int64_t>(sums[1]),
             job_.eval.exact_match ? fmt::format(", exact match {:.3f} ({}/{})", m->eval_exact_match,
                                                 static_cast<int64_t>(sums[4]), static_cast<int64_t>(sums[3]))
                                   : std::string(),
             secs);
  }
  return OkStatus();
}

// The held-out pairs with the current weights (adapters included: a
// forward-only pass applies no dropout), each pair's loss and TRL metrics
// against the reference log-probs stored before the first step (orpo: none).
Status Trainer::EvaluatePairs(StepMetrics* m) {
  const auto t0 = std::chrono::steady_clock::now();
  PairScoringOptions o;
  o.micro = job_.train.micro_batch;
  o.seq_len = job_.data.seq_len;
  o.max_pairs = job_.eval.max_samples;
  o.rank = dist_.rank;
  o.world = dist_.world;
  auto scored = ScorePairs(*model_, *runtime_, backend_.get(), *eval_data_, o);
  if (!scored.ok()) return scored.status().WithContext("eval on held-out pairs at step " + std::to_string(m->step));
  ASSIGN_OR_RETURN(PreferenceSums mine, ScoredPairSums(job_.preference, *scored, eval_reference_logps_));
  double s[PreferenceSums::kFields];
  mine.ToArray(s);
  RETURN_IF_ERROR(runtime_->AllReduceSum(s, PreferenceSums::kFields));
  const PreferenceMetrics pm = MeanMetrics(PreferenceSums::FromArray(s));
  m->eval_pairs = m->eval_samples = static_cast<int64_t>(s[0]);
  m->eval_exact_match = -1;
  PutPreferenceFigures(pm, /*eval=*/true, m);
  if (dist_.rank == 0)
    LOG_INFO("eval step {}: loss {:.4f} over {} pairs, {} in {:.2f} s", m->step, m->eval_loss, m->eval_pairs,
             FormatFigures(*m, MetricSplit::kEval),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return OkStatus();
}

}  // namespace shard
