// The Trainer's LoRA side (peft: method lora): adapters over the frozen,
// sharded base. Kept apart from trainer.cc so full fine-tuning reads as before.
#include "shard/ckpt/peft_adapter.h"
#include "shard/model/hf_io.h"
#include "shard/spec/run_fingerprint.h"
#include "shard/train/lora_checkpoint.h"
#include "shard/common/logging.h"
#include "shard/train/trainer.h"

namespace shard {

Status Trainer::InitLora() {
  const PeftConfig& p = job_.peft;
  const std::string where = job_.source.empty() ? "peft" : job_.source + ": peft";
  // The memory simulator plans from config.json alone: no weights to hash.
  if (backend_->holds_data()) {
    ASSIGN_OR_RETURN(lora_base_hash_, BaseModelHash(job_, model_->config().ShapeHash(), base_weights_hash_));
  }
  ASSIGN_OR_RETURN(lora_, LoraAdapters::Create(backend_.get(), model_->config(), p, job_.train.seed));
  if (!p.from_adapter.empty()) {
    // Every rank reads the (small) folder itself: no broadcast needed.
    std::vector<std::vector<float>> layers;
    RETURN_IF_ERROR(ReadPeftAdapter(p.from_adapter, p, lora_->layout(), &layers).WithContext(where + ".from_adapter"));
    for (int l = 0; l < lora_->layout().num_layers; ++l) lora_->WriteLayer(l, layers[l].data());
    if (dist_.rank == 0) LOG_INFO("LoRA: adapters loaded from {}", p.from_adapter);
  }
  RETURN_IF_ERROR(model_->SetLora(lora_->binding()));
  if (job_.parallel.offload_optimizer && dist_.rank == 0)
    LOG_INFO("parallel.offload_optimizer: a LoRA job's base has no optimizer state and its adapters' is small; "
             "nothing is offloaded");
  if (p.method == PeftMethod::kQlora && dist_.rank == 0) {
    int64_t nf4_bytes = 0, nf4_numel = 0;
    for (int u = 0; u < runtime_->num_units(); ++u)
      if (runtime_->quantized(u)) nf4_bytes += runtime_->nf4_format(u).bytes, nf4_numel += runtime_->layout(u).shard_numel;
    LOG_INFO("QLoRA: the blocks' linear layers held as NF4 (blocks of {}{}): {:.2f} MiB per rank, {:.4f} bytes per "
             "parameter (norms in the compute dtype; embedding and head unquantised)",
             p.block_size, p.double_quant ? ", 8-bit double-quantised scales" : "", nf4_bytes / 1048576.0,
             nf4_numel ? static_cast<double>(nf4_bytes) / nf4_numel : 0.0);
  }
  if (dist_.rank == 0)
    LOG_INFO("{}: r {} alpha {} scale {:.4g}{}, {} target module(s), {:.3f}M trainable parameters ({:.3f}% of "
             "{:.2f}M), base frozen",
             p.method == PeftMethod::kQlora ? "QLoRA" : "LoRA", p.r, p.alpha, p.scale(), p.use_rslora ? " (rsLoRA)" : "", p.target_modules.size(), lora_->numel() / 1e6,
             100.0 * lora_->numel() / model_->config().NumParams(), model_->config().NumParams() / 1e6);
  return OkStatus();
}

Status Trainer::ExportLora(const std::string& dir, DType dtype) {
  const LoraLayout& ll = lora_->layout();
  std::vector<std::vector<float>> layers(ll.num_layers, std::vector<float>(ll.layer_numel));
  for (int l = 0; l < ll.num_layers; ++l) lora_->ReadLayer(l, layers[l].data());
  const ParamLayout& layout = model_->layout();
  if (!job_.export_.merge) {
    if (dist_.rank != 0) return OkStatus();  // the adapters are the same on every rank
    const std::string base = job_.model.from_hf.empty() ? job_.model.preset : job_.model.from_hf;
    return WritePeftAdapter(dir, job_.peft, ll, base, layers, dtype).WithContext("export.hf_dir");
  }
  // Merged: every rank takes part in each unit's gather; rank 0 merges and writes.
  auto get_unit = [&](int u, std::vector<float>* buf) -> Status {
    RETURN_IF_ERROR(runtime_->GatherUnit(u, buf, optimizer_->master(u)));
    const UnitSpec& spec = layout.units[u];
    if (spec.kind == UnitKind::kBlock)
      MergeLoraLayer(ll, spec, lora_->binding()->scale, layers[spec.layer].data(), buf->data());
    return OkStatus();
  };
  if (dist_.rank != 0) {
    for (int u = 0; u < layout.num_units(); ++u)
      RETURN_IF_ERROR(runtime_->GatherUnit(u, /*out=*/nullptr, optimizer_->master(u)));
    return OkStatus();
  }
  return shard::ExportHf(dir, model_->config(), layout, get_unit, dtype);
}

Status Trainer::SaveLora() {
  if (dist_.rank != 0) return OkStatus();  // every rank holds the same adapters
  LoraCheckpointState st;
  st.step = step_;
  st.optimizer_steps = optimizer_steps_;
  st.samples_seen = samples_seen_;
  st.tokens_seen = tokens_seen_;
  st.loss_scale = scaler_->scale();
  st.loss_scale_good_steps = scaler_->good_steps();
  st.run_fingerprint = RunFingerprint(run_keys_);
  st.base_model = job_.model.from_hf.empty() ? job_.model.preset : job_.model.from_hf;
  st.base_hash = lora_base_hash_;
  return SaveLoraCheckpoint(checkpointer_->job_dir(), st, *lora_, job_.checkpoint.keep_last)
      .WithContext("LoRA checkpoint of step " + std::to_string(step_));
}

Status Trainer::ResumeLora() {
  const std::string& resume = job_.checkpoint.resume;
  if (resume == "none") return OkStatus();
  std::string dir = resume;
  if (resume == "auto") {
    ASSIGN_OR_RETURN(dir, FindLoraCheckpoint(checkpointer_->job_dir(), RunFingerprint(run_keys_)));
    if (dir.empty()) return AgreeOnResume(-2, "");  // from scratch (or from peft.from_adapter)
  }
  LoraCheckpointState st;
  Status loaded = LoadLoraCheckpoint(dir, lora_base_hash_, lora_.get(), &st).WithContext("resume");
  Status agreed = AgreeOnResume(loaded.ok() ? static_cast<double>(st.step) : -1.0, dir);
  RETURN_IF_ERROR(loaded);
  RETURN_IF_ERROR(agreed);
  step_ = st.step;
  optimizer_steps_ = st.optimizer_steps;
  samples_seen_ = st.samples_seen;
  tokens_seen_ = st.tokens_seen;
  if (scaler_->mode() == LossScaleMode::kDynamic)
    RETURN_IF_ERROR(scaler_->Restore(st.loss_scale, st.loss_scale_good_steps).WithContext("resume from " + dir));
  resumed_from_ = dir;
  if (dist_.rank == 0) LOG_INFO("resumed the LoRA adapters from {} (step {})", dir, st.step);
  return OkStatus();
}

StatusOr<double> Trainer::ReduceLoraGrads() {
  RETURN_IF_ERROR(lora_->ReduceGrads(*runtime_));
  return lora_->GradNormSquared();
}

}  // namespace shard
