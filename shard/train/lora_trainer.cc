// The Trainer's LoRA side (peft: method lora): adapters over the frozen,
// sharded base. Kept apart from trainer.cc so full fine-tuning reads as before.
#include "shard/common/logging.h"
#include "shard/train/trainer.h"

namespace shard {

Status Trainer::InitLora() {
  const PeftConfig& p = job_.peft;
  const std::string where = job_.source.empty() ? "peft" : job_.source + ": peft";
  // What is not built yet says so, rather than training something else.
  if (p.method == PeftMethod::kQlora)
    return Unimplemented(where + ".method qlora: the NF4 base under FSDP is not built yet (NF4 quantisation is: "
                         "shard/tensor/nf4.h); use method lora");
  if (!p.from_adapter.empty())
    return Unimplemented(where + ".from_adapter: loading a PEFT adapter folder is not built yet");
  if (job_.checkpoint.every_steps > 0)
    return Unimplemented(job_.source + ": checkpoint.every_steps: adapter-only checkpoints are not built yet; set "
                         "it to 0 for a peft: job");
  if (job_.checkpoint.resume != "auto" && job_.checkpoint.resume != "none")
    return Unimplemented(job_.source + ": checkpoint.resume: resuming a peft: job is not built yet");
  if (!job_.export_.hf_dir.empty())
    return Unimplemented(job_.source + ": export.hf_dir: exporting adapters (PEFT layout) is not built yet");
  ASSIGN_OR_RETURN(lora_, LoraAdapters::Create(backend_.get(), model_->config(), p, job_.train.seed));
  RETURN_IF_ERROR(model_->SetLora(lora_->binding()));
  if (job_.parallel.offload_optimizer && dist_.rank == 0)
    LOG_INFO("parallel.offload_optimizer: a LoRA job's base has no optimizer state and its adapters' is small; "
             "nothing is offloaded");
  if (dist_.rank == 0)
    LOG_INFO("LoRA: r {} alpha {} scale {:.4g}{}, {} target module(s), {:.3f}M trainable parameters ({:.3f}% of "
             "{:.2f}M), base frozen",
             p.r, p.alpha, p.scale(), p.use_rslora ? " (rsLoRA)" : "", p.target_modules.size(), lora_->numel() / 1e6,
             100.0 * lora_->numel() / model_->config().NumParams(), model_->config().NumParams() / 1e6);
  return OkStatus();
}

StatusOr<double> Trainer::ReduceLoraGrads() {
  RETURN_IF_ERROR(lora_->ReduceGrads(*runtime_));
  return lora_->GradNormSquared();
}

}  // namespace shard
