// SftObjective: the per-token cross-entropy of token windows and packed SFT
// samples (LlamaModel::ForwardBackward), normalised by the step's target
// tokens (the trainer's grad_scale), and eval.data scored by EvaluateSft.
// MakeObjective picks the job's objective.
#include "shard/train/objective.h"

#include <chrono>

#include "shard/common/logging.h"
#include "shard/train/sft_eval.h"

namespace shard {
namespace {

class SftObjective : public Objective {
 public:
  Status Prepare(const ObjectiveParts& parts) override {
    p_ = parts;
    return OkStatus();
  }
  void BeginStep(int64_t, double) override {}
  StatusOr<double> MicroStep(const DeviceBatch& b, int64_t, int64_t, const int32_t*, float grad_scale) override {
    return p_.model->ForwardBackward(b, *p_.runtime, grad_scale);
  }
  Status FinishStep(StepMetrics*) override { return OkStatus(); }
  Status Evaluate(StepMetrics* m) override;

 private:
  ObjectiveParts p_;
};

Status SftObjective::Evaluate(StepMetrics* m) {
  const JobConfig& job = *p_.job;
  const auto t0 = std::chrono::steady_clock::now();
  SftEvalOptions o;
  o.seq_len = job.data.seq_len;
  o.batch = job.train.micro_batch;
  o.max_samples = job.eval.max_samples;
  o.exact_match = job.eval.exact_match;
  o.rank = p_.rank;
  o.world = p_.world;
  o.lora = p_.lora ? p_.lora->binding() : nullptr;  // peft: the base plus the adapters as trained
  p_.runtime->BeginMicroBatch();  // a pass outside the recorded training order
  ASSIGN_OR_RETURN(SftEvalResult r, EvaluateSft(p_.model->config(), p_.backend, *p_.runtime, *p_.eval_data, o));
  RETURN_IF_ERROR(p_.runtime->FinishMicroBatch());  // frees what the pass left gathered
  double sums[5] = {r.loss_sum, static_cast<double>(r.target_tokens), static_cast<double>(r.samples),
                    static_cast<double>(r.scored), static_cast<double>(r.exact)};
  RETURN_IF_ERROR(p_.runtime->AllReduceSum(sums, 5));
  m->eval_samples = static_cast<int64_t>(sums[2]);
  m->eval_loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  m->eval_exact_match = job.eval.exact_match ? (sums[3] > 0 ? sums[4] / sums[3] : 0.0) : -1.0;
  if (p_.rank == 0) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    LOG_INFO("eval step {}: loss {:.4f} over {} samples ({} target tokens){} in {:.2f} s", m->step, m->eval_loss,
             m->eval_samples, static_cast<int64_t>(sums[1]),
             job.eval.exact_match ? fmt::format(", exact match {:.3f} ({}/{})", m->eval_exact_match,
                                                static_cast<int64_t>(sums[4]), static_cast<int64_t>(sums[3]))
                                  : std::string(),
             secs);
  }
  return OkStatus();
}

}  // namespace

std::unique_ptr<Objective> MakeObjective(const JobConfig& job) {
  if (job.preference.enabled()) return MakePreferenceObjective(job);
  return std::make_unique<SftObjective>();
}

}  // namespace shard
