// Adapters over a frozen base (peft: method lora or qlora): every rank holds
// all adapters (LoraAdapters) and their AdamW state; the base stays sharded
// and frozen in the FSDP runtime (FsdpOptions::frozen, NF4 under QLoRA).
// Adapter-only checkpoints (lora_checkpoint.h): rank 0 writes, every rank
// resumes. Export: a PEFT adapter folder or (export.merge) the merged model.
#include "shard/ckpt/peft_adapter.h"
#include "shard/common/logging.h"
#include "shard/model/hf_io.h"
#include "shard/spec/run_fingerprint.h"
#include "shard/train/lora_checkpoint.h"
#include "shard/train/trainable.h"

namespace shard {
namespace {

class LoraTrainable : public Trainable {
 public:
  LoraTrainable(const TrainableParts& p, std::unique_ptr<LoraAdapters> lora, std::string base_hash)
      : p_(p), lora_(std::move(lora)), base_hash_(std::move(base_hash)) {}

  void ZeroGrads() override {
    p_.runtime->ZeroGrads();
    lora_->ZeroGrads();
  }
  // Fresh adapter dropout masks per step, rank and micro-batch.
  void BeginMicroBatch(uint64_t seed) override { lora_->binding()->dropout_seed = seed; }
  // The step's adapter gradients summed over the world; their squared norm.
  StatusOr<double> ReduceGradsNormSquared() override {
    RETURN_IF_ERROR(lora_->ReduceGrads(*p_.runtime));
    return lora_->GradNormSquared();
  }
  Status Step(const OptimConfig& config, float lr, int64_t step, float grad_scale) override {
    lora_->Step(config, lr, step, grad_scale);
    return OkStatus();
  }
  Status Save(const Manifest& run, CheckpointTier tier) override;
  Status Resume(ResumeState* state) override;
  Status Export(const std::string& dir, DType dtype) override;
  const char* checkpoint_prefix() const override { return "lora_"; }
  LoraAdapters* adapters() override { return lora_.get(); }

 private:
  std::string BaseName() const {
    return p_.job->model.from_hf.empty() ? p_.job->model.preset : p_.job->model.from_hf;
  }

  TrainableParts p_;
  std::unique_ptr<LoraAdapters> lora_;
  std::string base_hash_;  // the base's identity, saved with and checked against checkpoints
};

Status LoraTrainable::Save(const Manifest& run, CheckpointTier tier) {
  // JobConfig::Validate refuses checkpoint.memory for a peft: job.
  if (tier != CheckpointTier::kDisk) return FailedPrecondition("a peft: job has no memory checkpoint tier");
  if (p_.rank != 0) return OkStatus();  // every rank holds the same adapters
  LoraCheckpointState st;
  st.step = run.step;
  st.optimizer_steps = run.optimizer_steps;
  st.samples_seen = run.samples_seen;
  st.tokens_seen = run.tokens_seen;
  st.loss_scale = run.loss_scale;
  st.loss_scale_good_steps = run.loss_scale_good_steps;
  st.run_fingerprint = run.run_fingerprint;
  st.base_model = BaseName();
  st.base_hash = base_hash_;
  return SaveLoraCheckpoint(p_.checkpointer->job_dir(), st, *lora_, p_.job->checkpoint.keep_last)
      .WithContext("LoRA checkpoint of step " + std::to_string(run.step));
}

Status LoraTrainable::Resume(ResumeState* state) {
  const std::string& resume = p_.resume_spec.empty() ? p_.job->checkpoint.resume : p_.resume_spec;
  if (resume == "none") return OkStatus();
  std::string dir = resume;
  if (resume == "auto") {
    ASSIGN_OR_RETURN(dir, FindLoraCheckpoint(p_.checkpointer->job_dir(), RunFingerprint(p_.run_keys)));
    if (dir.empty()) return AgreeOnResume(*p_.runtime, -2, "");  // from scratch (or from peft.from_adapter)
  }
  LoraCheckpointState st;
  Status loaded = LoadLoraCheckpoint(dir, base_hash_, lora_.get(), &st).WithContext("resume");
  Status agreed = AgreeOnResume(*p_.runtime, loaded.ok() ? static_cast<double>(st.step) : -1.0, dir);
  RETURN_IF_ERROR(loaded);
  RETURN_IF_ERROR(agreed);
  state->counters = {st.step, st.optimizer_steps, st.samples_seen, st.tokens_seen};
  if (state->scaler->mode() == LossScaleMode::kDynamic)
    RETURN_IF_ERROR(state->scaler->Restore(st.loss_scale, st.loss_scale_good_steps).WithContext("resume from " + dir));
  state->resumed_from = dir;
  if (p_.rank == 0) LOG_INFO("resumed the LoRA adapters from {} (step {})", dir, st.step);
  return OkStatus();
}

Status LoraTrainable::Export(const std::string& dir, DType dtype) {
  const LoraLayout& ll = lora_->layout();
  std::vector<std::vector<float>> layers(ll.num_layers, std::vector<float>(ll.layer_numel));
  for (int l = 0; l < ll.num_layers; ++l) lora_->ReadLayer(l, layers[l].data());
  const ParamLayout& layout = p_.model->layout();
  if (!p_.job->export_.merge) {
    if (p_.rank != 0) return OkStatus();  // the adapters are the same on every rank
    return WritePeftAdapter(dir, p_.job->peft, ll, BaseName(), layers, dtype).WithContext("export.hf_dir");
  }
  // Merged: every rank takes part in each unit's gather; rank 0 merges and writes.
  FsdpRuntime& rt = *p_.runtime;
  auto get_unit = [&](int u, std::vector<float>* buf) -> Status {
    RETURN_IF_ERROR(rt.GatherUnit(u, buf, p_.optimizer->master(u)));
    const UnitSpec& spec = layout.units[u];
    if (spec.kind == UnitKind::kBlock)
      MergeLoraLayer(ll, spec, lora_->binding()->scale, layers[spec.layer].data(), buf->data());
    return OkStatus();
  };
  if (p_.rank != 0) {
    for (int u = 0; u < layout.num_units(); ++u)
      RETURN_IF_ERROR(rt.GatherUnit(u, /*out=*/nullptr, p_.optimizer->master(u)));
    return OkStatus();
  }
  return shard::ExportHf(dir, p_.model->config(), layout, get_unit, dtype);
}

void LogLora(const TrainableParts& p, const LoraAdapters& lora) {
  const PeftConfig& peft = p.job->peft;
  const FsdpRuntime& rt = *p.runtime;
  if (p.job->parallel.offload_optimizer)
    LOG_INFO("parallel.offload_optimizer: a LoRA job's base has no optimizer state and its adapters' is small; "
             "nothing is offloaded");
  if (peft.method == PeftMethod::kQlora) {
    int64_t nf4_bytes = 0, nf4_numel = 0;
    for (int u = 0; u < rt.num_units(); ++u)
      if (rt.quantized(u)) nf4_bytes += rt.nf4_format(u).bytes, nf4_numel += rt.layout(u).shard_numel;
    LOG_INFO("QLoRA: the blocks' linear layers held as NF4 (blocks of {}{}): {:.2f} MiB per rank, {:.4f} bytes per "
             "parameter (norms in the compute dtype; embedding and head unquantised)",
             peft.block_size, peft.double_quant ? ", 8-bit double-quantised scales" : "", nf4_bytes / 1048576.0,
             nf4_numel ? static_cast<double>(nf4_bytes) / nf4_numel : 0.0);
  }
  const LlamaConfig& config = p.model->config();
  LOG_INFO("{}: r {} alpha {} scale {:.4g}{}, {} target module(s), {:.3f}M trainable parameters ({:.3f}% of "
           "{:.2f}M), base frozen",
           peft.method == PeftMethod::kQlora ? "QLoRA" : "LoRA", peft.r, peft.alpha, peft.scale(),
           peft.use_rslora ? " (rsLoRA)" : "", lora.layout().targets.size(), lora.numel() / 1e6,
           100.0 * lora.numel() / config.NumParams(), config.NumParams() / 1e6);
}

}  // namespace

// Fresh adapters (or peft.from_adapter's) bound to the model over the frozen base.
StatusOr<std::unique_ptr<Trainable>> CreateLoraTrainable(const TrainableParts& p) {
  const JobConfig& job = *p.job;
  const PeftConfig& peft = job.peft;
  const std::string where = job.source.empty() ? "peft" : job.source + ": peft";
  std::string base_hash;
  // The memory simulator plans from config.json alone: no weights to hash.
  if (p.backend->holds_data()) {
    ASSIGN_OR_RETURN(base_hash, BaseModelHash(job, p.model->config().ShapeHash(), p.base_weights_hash));
  }
  ASSIGN_OR_RETURN(auto lora, LoraAdapters::Create(p.backend, p.model->config(), peft, job.train.seed));
  if (!peft.from_adapter.empty()) {
    // Every rank reads the (small) folder itself: no broadcast needed.
    std::vector<std::vector<float>> layers;
    RETURN_IF_ERROR(ReadPeftAdapter(peft.from_adapter, peft, lora->layout(), &layers).WithContext(where + ".from_adapter"));
    for (int l = 0; l < lora->layout().num_layers; ++l) lora->WriteLayer(l, layers[l].data());
    if (p.rank == 0) LOG_INFO("LoRA: adapters loaded from {}", peft.from_adapter);
  }
  RETURN_IF_ERROR(p.model->SetLora(lora->binding()));
  if (p.rank == 0) LogLora(p, *lora);
  return std::unique_ptr<Trainable>(new LoraTrainable(p, std::move(lora), std::move(base_hash)));
}

}  // namespace shard
