// The training objective: what one step's micro-batches compute and how the
// step's loss and metrics read, as one interface the trainer's step calls
// (Trainable is the same for what is trained). SFT and token windows
// (SftObjective, objective.cc) differentiate the per-token cross-entropy;
// a preference: job (dpo, ipo, orpo; preference_training.cc) scores pairs
// of replies against a reference pass it makes before the first step.
//
// The trainer owns the model, the runtime and the data; it hands them over
// once (ObjectiveParts) and then calls, per step: BeginStep, MicroStep for
// each of this rank's micro-batches, and FinishStep after the step's
// gradients and loss are reduced over all ranks. Evaluate scores eval.data.
//
// Adding an objective: docs/architecture.md, "Add a training objective".
//
// Thread-safety: one thread (the trainer's).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shard/backend/backend.h"
#include "shard/common/status.h"
#include "shard/data/prepared_dataset.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/model/llama_model.h"
#include "shard/spec/job_config.h"
#include "shard/spec/step_metrics.h"
#include "shard/train/batch_source.h"
#include "shard/train/lora_adapters.h"

namespace shard {

// The trainer's parts an objective works with; they outlive it.
class CpGroup;

struct ObjectiveParts {
  const JobConfig* job = nullptr;
  int rank = 0;
  int world = 1;
  Backend* backend = nullptr;
  LlamaModel* model = nullptr;
  FsdpRuntime* runtime = nullptr;
  LoraAdapters* lora = nullptr;                 // peft: the adapters; null for a full fine-tune
  const BatchSource* data = nullptr;            // the training data (its item ids, its fingerprint)
  const PreparedDataset* eval_data = nullptr;   // eval.data prepared; null without eval:
  std::string eval_prefix;                      // where eval.data is prepared (EvalPreparedPrefix)
  std::string resume_step_dir;                  // the step resumed from; "" = a fresh start
  uint64_t base_weights_hash = 0;               // the HF weights' values (base_weights_hash.h), 0 = none
  Precision precision = Precision::kFp32;       // train.precision as resolved for this backend
  CpGroup* cp = nullptr;                        // context parallelism: this rank's CP group; null at C = 1
};

class Objective {
 public:
  virtual ~Objective() = default;

  // Once, after the data is open and before a checkpoint is resumed (the
  // weights are still the starting ones): keeps `parts` for the later calls.
  virtual Status Prepare(const ObjectiveParts& parts) = 0;
  // A step of `global_items` items (samples, windows or pairs; all ranks) under `loss_scale`.
  virtual void BeginStep(int64_t global_items, double loss_scale) = 0;
  // Forward and backward of one micro-batch: items [first_item, first_item +
  // items) of the step's batch, loaded into b (host_targets: its targets on
  // the host). grad_scale: the loss scale over the step's target tokens.
  // Adds the gradients through the runtime; returns the micro-batch's loss sum.
  virtual StatusOr<double> MicroStep(const DeviceBatch& b, int64_t first_item, int64_t items,
                                     const int32_t* host_targets, float grad_scale) = 0;
  // After the step's reduction (m->loss: the reduced loss sum over the
  // step's target tokens): the objective's own figures into m. A collective.
  virtual Status FinishStep(StepMetrics* m) = 0;
  // Scores eval.data with the current weights into m->eval_*. A collective.
  virtual Status Evaluate(StepMetrics* m) = 0;

  // Whether a MoE model's aux loss joins the step (false: its factor is 0).
  virtual bool moe_aux_loss() const { return true; }
  // The reference model's key each checkpoint records ("" = none; Manifest::reference).
  virtual std::string reference_model() const { return ""; }
  // Reference passes made (dpo, ipo): one per set of pairs not stored yet.
  virtual int reference_passes() const { return 0; }
};

// The job's objective: a preference: job's (MakePreferenceObjective), else SFT.
std::unique_ptr<Objective> MakeObjective(const JobConfig& job);
// preference_training.cc: dpo, ipo or orpo over pairs (job.preference).
std::unique_ptr<Objective> MakePreferenceObjective(const JobConfig& job);

}  // namespace shard
