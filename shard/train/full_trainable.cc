// The whole model trained (full fine-tuning, pretraining): the FSDP runtime's
// parameter shards, their gradients reduced into the owned shards, AdamW on
// OptimizerState (on the device or offloaded), step directories written by the
// Checkpointer, and an HF folder gathered unit by unit on export.
#include "shard/ckpt/catalog.h"
#include "shard/common/logging.h"
#include "shard/model/hf_io.h"
#include "shard/train/trainable.h"

namespace shard {
namespace {

class FullTrainable : public Trainable {
 public:
  explicit FullTrainable(const TrainableParts& p) : p_(p) {}

  void ZeroGrads() override { p_.runtime->ZeroGrads(); }
  void BeginMicroBatch(uint64_t) override {}
  StatusOr<double> ReduceGradsNormSquared() override { return p_.runtime->GradNormSquared(); }
  Status Step(const OptimConfig& config, float lr, int64_t step, float grad_scale) override {
    return p_.optimizer->Step(p_.model->layout(), config, lr, step, grad_scale);
  }
  Status Save(const Manifest& run, CheckpointTier tier) override { return p_.checkpointer->Save(run, tier); }
  Status Resume(ResumeState* state) override;
  Status Export(const std::string& dir, DType dtype) override;
  const char* checkpoint_prefix() const override { return ""; }

 private:
  // Warnings for a checkpoint saved under other data or optimizer settings.
  void WarnOnDifferences(const CheckpointReader& reader, const std::string& step_dir, const BatchSource& data);
  // The restored counters and loss scale.
  Status RestoreRun(const Manifest& m, const std::string& step_dir, ResumeState* state);

  TrainableParts p_;
};

Status FullTrainable::Resume(ResumeState* state) {
  const ResumeChoice& choice = p_.resume;  // chosen in Init, before any weight was loaded
  if (choice.step_dir.empty()) return AgreeOnResume(*p_.runtime, -2, "");  // from scratch
  if (!choice.note.empty() && p_.rank == 0) LOG_WARN("resume: {}", choice.note);
  const std::string& step_dir = choice.step_dir;
  auto reader = CheckpointReader::Open(step_dir, /*verify_checksums=*/!choice.verified);
  Status agreed = AgreeOnResume(*p_.runtime, reader.ok() ? static_cast<double>(reader->manifest().step) : -1.0,
                                step_dir);
  if (!reader.ok()) return reader.status().WithContext("resume from " + step_dir);
  RETURN_IF_ERROR(agreed);
  const Manifest& m = reader->manifest();
  if (m.model_hash != p_.model->config().ShapeHash())
    return InvalidArgument("resume: " + step_dir + " holds a different model shape than this job's model");
  if (m.units.size() != static_cast<size_t>(p_.runtime->num_units()))
    return InvalidArgument("resume: " + step_dir + " has a different unit count");
  WarnOnDifferences(*reader, step_dir, *state->data);
  FsdpRuntime& rt = *p_.runtime;
  const int sr = rt.shard_rank();
  std::vector<float> p, mm, vv;
  for (int u = 0; u < rt.num_units(); ++u) {
    const ShardLayout& sl = rt.layout(u);
    p.resize(sl.shard_numel);
    mm.resize(sl.shard_numel);
    vv.resize(sl.shard_numel);
    RETURN_IF_ERROR(reader->ReadUnitRange(u, sl.begin(sr), sl.end(sr), p.data(), mm.data(), vv.data()));
    p_.optimizer->WriteShard(u, p.data(), mm.data(), vv.data());
  }
  return RestoreRun(m, step_dir, state);
}

void FullTrainable::WarnOnDifferences(const CheckpointReader& reader, const std::string& step_dir,
                                      const BatchSource& data) {
  const Manifest& m = reader.manifest();
  const JobConfig& job = *p_.job;
  if (m.seed != job.train.seed || m.shuffle != job.data.shuffle || m.global_batch != job.train.global_batch)
    LOG_WARN("resume: {} was saved with seed {}, shuffle {}, global_batch {}; this job uses {}, {}, {} — the data "
             "order after the resume differs from the original run's",
             step_dir, m.seed, m.shuffle, m.global_batch, job.train.seed, job.data.shuffle, job.train.global_batch);
  const std::string data_now = data.Fingerprint();
  if (!m.data_fingerprint.empty() && !data_now.empty() && m.data_fingerprint != data_now)
    LOG_WARN("resume: {} was saved while training on other data ({}; now {}) — its sample cursor {} indexes "
             "different samples here",
             step_dir, m.data_fingerprint, data_now, m.samples_seen);
  // The state as saved and as this job holds it may differ (optim.state_dtype
  // changed between runs): converted on load, and said so.
  const DType saved_dt = reader.state_dtype(), held_dt = p_.optimizer->state_dtype();
  if (saved_dt != held_dt && p_.rank == 0)
    LOG_WARN("resume: {} holds the optimizer state (master weights, AdamW m and v) in {}; this job holds it in {} "
             "(optim.state_dtype): converted on load{}",
             step_dir, DTypeName(saved_dt), DTypeName(held_dt),
             held_dt == DType::kBF16 ? " (rounded to nearest bf16)" : " (widened exactly)");
}

Status FullTrainable::RestoreRun(const Manifest& m, const std::string& step_dir, ResumeState* state) {
  state->counters = {m.step, m.optimizer_steps, m.samples_seen, m.tokens_seen};
  // A dynamic scale continues where it was; a static one comes from the job
  // file. A checkpoint saved without a dynamic scaler has no walk to continue.
  LossScaler& scaler = *state->scaler;
  if (scaler.mode() == LossScaleMode::kDynamic) {
    if (m.loss_scale_mode == "dynamic") {
      RETURN_IF_ERROR(scaler.Restore(m.loss_scale, m.loss_scale_good_steps).WithContext("resume from " + step_dir));
    } else if (p_.rank == 0) {
      LOG_INFO("resume: {} was saved with loss scaling {}; the dynamic scale starts at {}", step_dir,
               m.loss_scale_mode, scaler.scale());
    }
  }
  state->resumed_from = step_dir;
  const int shard_count = p_.shard_count;
  LOG_INFO("resumed from {} (step {}, {} samples seen, saved by {} ranks as {} shards{})", step_dir, m.step,
           m.samples_seen, m.world, m.shard_count,
           m.shard_count != shard_count ? ", resharded to " + std::to_string(shard_count) : "");
  return OkStatus();
}

Status FullTrainable::Export(const std::string& dir, DType dtype) {
  FsdpRuntime& rt = *p_.runtime;
  const ParamLayout& layout = p_.model->layout();
  // Every rank takes part in each unit's gather; rank 0 alone writes.
  if (p_.rank != 0) {
    for (int u = 0; u < layout.num_units(); ++u)
      RETURN_IF_ERROR(rt.GatherUnit(u, /*out=*/nullptr, p_.optimizer->master(u)));
    return OkStatus();
  }
  return shard::ExportHf(dir, p_.model->config(), layout,
                         [&](int u, std::vector<float>* buf) { return rt.GatherUnit(u, buf, p_.optimizer->master(u)); },
                         dtype);
}

}  // namespace

StatusOr<std::unique_ptr<Trainable>> CreateFullTrainable(const TrainableParts& parts) {
  return std::unique_ptr<Trainable>(new FullTrainable(parts));
}

StatusOr<std::unique_ptr<Trainable>> CreateTrainable(const TrainableParts& parts) {
  if (parts.job->peft.enabled()) return CreateLoraTrainable(parts);
  return CreateFullTrainable(parts);
}

Status AgreeOnResume(FsdpRuntime& runtime, double mine, const std::string& step_dir) {
  double sum[2] = {mine, 1.0};
  RETURN_IF_ERROR(runtime.AllReduceSum(sum, 2));
  if (sum[0] == mine * sum[1]) return OkStatus();
  return FailedPrecondition("resume: ranks chose different checkpoints (this rank: " +
                            (step_dir.empty() ? std::string("none, a fresh start") : step_dir) +
                            "); is the checkpoint directory one shared filesystem that every rank sees alike?");
}

}  // namespace shard
