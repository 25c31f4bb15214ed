// What a job trains, behind one interface the Trainer calls without asking
// which: the whole model (full fine-tuning or pretraining: the FSDP runtime's
// sharded parameters and their AdamW state, full_trainable.cc) or adapters
// over a frozen base (peft: method lora or qlora, lora_trainable.cc). The
// choice is made once, when the trainer is built (CreateTrainable), the way
// TorchTitan applies a model converter instead of branching in its loop.
//
// Each implementation owns what differs between the two: which gradients a
// step zeroes and reduces, the gradient norm, the optimizer step, the
// checkpoint format (full step directories vs adapter-only lora_step_N), what
// a resume restores, and the export (an HF folder vs a PEFT adapter folder or
// the merged model).
//
// Thread-safety: the training thread only, like the Trainer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shard/ckpt/manifest.h"
#include "shard/common/status.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/model/llama_model.h"
#include "shard/optim/loss_scaler.h"
#include "shard/spec/job_config.h"
#include "shard/spec/optim_config.h"
#include "shard/spec/run_fingerprint.h"
#include "shard/tensor/dtype.h"
#include "shard/train/batch_source.h"
#include "shard/train/checkpointer.h"
#include "shard/train/lora_adapters.h"
#include "shard/train/optimizer_state.h"
#include "shard/ckpt/resume_choice.h"

namespace shard {

// The trainer's counters a checkpoint carries beside the trained values.
struct RunCounters {
  int64_t step = 0;
  int64_t optimizer_steps = 0;
  int64_t samples_seen = 0;
  int64_t tokens_seen = 0;
};

// What Resume reads and restores besides the trained values.
struct ResumeState {
  const BatchSource* data = nullptr;  // its fingerprint is checked against the checkpoint's
  LossScaler* scaler = nullptr;       // a dynamic scale continues where it was
  RunCounters counters;               // restored (unchanged on a fresh start)
  std::string resumed_from;           // the checkpoint directory, "" = fresh start
};

class Trainable {
 public:
  virtual ~Trainable() = default;

  // The step's gradients to zero (the runtime's, and the adapters' for LoRA).
  virtual void ZeroGrads() = 0;
  // Before each micro-batch's forward; `seed` differs per step, rank and
  // micro-batch (LoRA draws its adapter dropout masks from it).
  virtual void BeginMicroBatch(uint64_t seed) = 0;
  // After FsdpRuntime::FinishGradients: the trained gradients reduced where
  // they are held; their squared norm on this rank (summed over the shard group).
  virtual StatusOr<double> ReduceGradsNormSquared() = 0;
  // One AdamW update of what is trained; grad_scale multiplies the gradients first.
  virtual Status Step(const OptimConfig& config, float lr, int64_t step, float grad_scale) = 0;
  // A checkpoint of the step `run` describes (its counters and run keys),
  // into the tier's folder (checkpoint_tier.h).
  virtual Status Save(const Manifest& run, CheckpointTier tier) = 0;
  // Loads the checkpoint to resume from, if any; every rank agrees on it (a
  // collective even on a fresh start).
  virtual Status Resume(ResumeState* state) = 0;
  // export.hf_dir: what this job produces (a collective; rank 0 writes).
  virtual Status Export(const std::string& dir, DType dtype) = 0;
  // The checkpoint step directories' name prefix ("step_N" or "lora_step_N").
  virtual const char* checkpoint_prefix() const = 0;
  // The LoRA adapters (null when the whole model is trained).
  virtual LoraAdapters* adapters() { return nullptr; }
};

// What both implementations are built over; owned by the Trainer.
struct TrainableParts {
  const JobConfig* job = nullptr;
  int rank = 0;
  int shard_count = 1;  // ranks per shard group
  Backend* backend = nullptr;
  LlamaModel* model = nullptr;
  FsdpRuntime* runtime = nullptr;
  OptimizerState* optimizer = nullptr;
  Checkpointer* checkpointer = nullptr;
  RunKeys run_keys;
  // Full training: the committed step Init chose (checkpoint.resume).
  ResumeChoice resume;
  // peft: checkpoint.resume as the rank is handed it (CheckpointTiers::resume
  // over the job file's): a step folder, auto or none.
  std::string resume_spec;
  // peft: the HF base's values hashed as the ranks loaded them (base_weights_hash.h).
  uint64_t base_weights_hash = 0;
};

// The job's trainable parameters: adapters for a peft: job, else the whole model.
StatusOr<std::unique_ptr<Trainable>> CreateTrainable(const TrainableParts& parts);
StatusOr<std::unique_ptr<Trainable>> CreateFullTrainable(const TrainableParts& parts);
StatusOr<std::unique_ptr<Trainable>> CreateLoraTrainable(const TrainableParts& parts);

// Every rank resumes from the same step, or every rank starts fresh: each
// chose from the filesystem on its own. `mine` is this rank's step, -1 when
// its checkpoint is unreadable, -2 for a fresh start. One all-reduce even on
// a fresh start, so no rank skips a collective the others make.
Status AgreeOnResume(FsdpRuntime& runtime, double mine, const std::string& step_dir);

}  // namespace shard
