// The training loop of one rank: its share of each global batch (token
// windows or packed SFT samples, batch_source.h) →
// micro-batches → model forward/backward through the FSDP runtime → clipped
// AdamW on the owned shards → metrics, and an HF export at the end (gathered
// unit by unit, written by rank 0).
//
// Thread-safety: one thread drives a Trainer.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/ckpt/hf_weights.h"
#include "shard/ckpt/resume_plan.h"
#include "shard/comm/flight_recorder.h"
#include "shard/common/kv_store.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/model/llama_model.h"
#include "shard/optim/loss_scaler.h"
#include "shard/train/batch_source.h"
#include "shard/spec/job_config.h"
#include "shard/train/checkpointer.h"
#include "shard/train/cp_group.h"
#include "shard/train/local_params.h"
#include "shard/train/lora_adapters.h"
#include "shard/train/optimizer_state.h"
#include "shard/train/precision.h"
#include "shard/train/objective.h"
#include "shard/ckpt/resume_choice.h"
#include "shard/train/trainable.h"
#include "shard/spec/run_fingerprint.h"
#include "shard/spec/step_metrics.h"
#include "shard/tensor/dtype.h"

namespace shard {

// Who this process is and how it reaches its peers: identity and transport.
// world == 1 needs nothing else.
struct DistIdentity {
  int rank = 0;
  int world = 1;
  std::string comm_backend = "gloo";  // gloo (processes) or local (ranks as threads)
  std::shared_ptr<KvStore> store;     // rendezvous
  std::string prefix;                 // namespaces rendezvous keys: "job/attempt/"
  std::string gloo_hostname = "127.0.0.1";
  // Where this rank's collectives are recorded (flight_recorder.h); the
  // worker's heartbeat reads it. Null: nothing is recorded.
  std::shared_ptr<FlightRecorder> flight_recorder;
};

// What the control plane tells the checkpoint tiers (neither identity nor a hook).
struct CheckpointInputs {
  // Set under the control plane: checkpoint shards are reported here and the
  // coordinator commits them (otherwise rank 0 commits).
  CheckpointReportFn report_checkpoint;
  // What this rank resumes from and where its memory tier is: the worker
  // builds it from the attempt's resume plan (shard/ckpt/resume_plan.h; the
  // coordinator's, or StandalonePlan's), never by editing the JobConfig.
  // Default: all as the job file says.
  CheckpointTiers tiers;
  // Set under the control plane: each memory step this rank skipped (it
  // could not be written) is told here, and the coordinator says it in a
  // memory_step_skipped event. Standalone: the log line only.
  MemorySkipFn memory_step_skipped;
};

// Callbacks, test hooks and simulator hooks: all empty (off) in a plain run.
struct TrainerHooks {
  // Rank 0 writes TensorBoard event files (tensorboard_writer.h) into the run
  // directory, <checkpoint.dir>/<name>. Off by default so library users and
  // tests leave no files behind; the worker turns it on.
  bool tensorboard = false;
  // Polled once per step on every rank (a Slurm preemption signal, say); if it
  // returns true on any rank, every rank checkpoints that same step and Run
  // returns early with stopped() set. The ranks agree through the step's
  // loss all-reduce, so the check costs no extra collective.
  std::function<bool()> stop_requested;
  // Test hook (fault injection): called on this rank after the step's
  // gradients are reduced into its owned shards and before their norm is
  // computed, with the 1-based step about to be taken. Tests write an inf/NaN
  // into one rank's shard here. Empty in production: one branch per step.
  std::function<void(int64_t step, Backend& backend, FsdpRuntime& runtime)> gradient_hook;
  // The memory simulator (shard/sim/memory_sim.h): the backend to train on
  // instead of resources.device's. A backend that holds no data
  // (Backend::holds_data) also makes the trainer skip what only data needs:
  // reading HF weights, preparing data (a synthetic batch of the job's shapes
  // stands in) and filling host buffers. Empty in production.
  std::function<StatusOr<std::unique_ptr<Backend>>()> make_backend;
  // Test hook: the objective to train with instead of the job's
  // (MakeObjective, objective.h). Empty in production.
  std::function<std::unique_ptr<Objective>(const JobConfig&)> make_objective;
};

// Everything a Trainer is started with besides the job: its three parts above.
struct DistContext : DistIdentity, CheckpointInputs, TrainerHooks {};

// Where eval.data is prepared: <checkpoint.dir>/<job name>/data/eval.
std::string EvalPreparedPrefix(const JobConfig& job);

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Create(const JobConfig& job, const DistContext& dist = {});

  // Runs the remaining steps; calls on_step after each (may be empty).
  Status Run(const std::function<void(const StepMetrics&)>& on_step = {});
  // One optimizer step.
  StatusOr<StepMetrics> Step();
  // Writes the current weights as an HF folder.
  Status ExportHf(const std::string& dir, DType dtype);

  // Training steps done (a step the loss scaler skipped counts: its batch is
  // consumed and the learning-rate schedule moves on).
  int64_t step() const { return step_; }
  // Updates applied to the weights: AdamW's bias-correction count. Lags step()
  // by the number of skipped steps.
  int64_t optimizer_steps() const { return optimizer_steps_; }
  const LossScaler& loss_scaler() const { return *scaler_; }
  // Run returned early because DistContext.stop_requested asked it to; the
  // step's checkpoint is written (and reported) by then.
  bool stopped() const { return stopped_; }
  // The step directory Init resumed from ("" = none).
  const std::string& resumed_from() const { return resumed_from_; }
  // The tier resumed_from() is in (disk when nothing was resumed).
  CheckpointTier resumed_tier() const { return resumed_tier_; }
  // The resume's fallbacks, one line each ("skipping step 530 (memory): …",
  // "starting from step 0: …"; ResumeChoice::events): rank 0 reports them.
  const std::vector<std::string>& resume_events() const { return resume_.events; }
  // Run found the job already at (or past) train.steps: it trained nothing.
  bool nothing_trained() const { return nothing_trained_; }
  int64_t total_steps() const { return job_.train.steps; }
  // The global sampler cursor: samples (or windows) consumed so far.
  int64_t samples_seen() const { return samples_seen_; }
  int rank() const { return dist_.rank; }
  const LlamaConfig& model_config() const { return model_->config(); }
  Backend* backend() const { return backend_.get(); }
  const ParamLayout& layout() const { return model_->layout(); }
  // Unit u's full parameters (a collective: every rank must call it in turn).
  Status UnitParams(int u, std::vector<float>* out) { return runtime_->GatherUnit(u, out, optimizer_->master(u)); }
  FsdpRuntime& runtime() { return *runtime_; }
  // The AdamW state (on the device, or offloaded: parallel.offload_optimizer).
  OptimizerState& optimizer() { return *optimizer_; }
  Checkpointer* checkpointer() { return checkpointer_.get(); }
  // What the job trains: the whole model, or adapters over a frozen base.
  Trainable& trainable() { return *trainable_; }
  // Reference passes this Trainer made (preference: dpo/ipo): one per set of
  // pairs (training, eval) whose log-probs were not stored yet; 0 on an
  // attempt that read them all back.
  int reference_passes() const { return objective_ ? objective_->reference_passes() : 0; }
  // The LoRA adapters (peft: lora); null for full fine-tuning.
  LoraAdapters* lora() { return trainable_ ? trainable_->adapters() : nullptr; }

 private:
  // The run's keys come from the job as given: Init resolves some fields in
  // job_ (precision auto -> fp32) that the coordinator never sees resolved.
  Trainer(const JobConfig& job, const DistContext& dist) : job_(job), dist_(dist), run_keys_(RunKeysOf(job)) {}
  Status Init();
  // Resolves the resume it is handed (dist_.tiers, else checkpoint.resume)
  // and the memory tier's folder into resume_.
  Status ChooseResume();
  // checkpoint.resume as this rank is handed it (CheckpointTiers::resume).
  const std::string& ResumeSpec() const { return dist_.tiers.resume.empty() ? job_.checkpoint.resume : dist_.tiers.resume; }
  // hf: the job's HF weights (model.from_hf), or null for the seeded init.
  Status InitRuntime(const HfWeights* hf, const PrecisionPlan& precision);
  // The initial weights of this rank's shards (no resume): from the HF
  // weights' byte ranges, or the seeded init when hf is null.
  Status LoadInitialWeights(const HfWeights* hf);
  // The job's Trainable (trainable.h): adapters for a peft: job, else the whole model.
  Status InitTrainable();
  // The job's objective (objective.h), prepared with the starting weights.
  Status PrepareObjective();
  // Loads the checkpoint to resume from (Trainable::Resume), if any.
  Status Resume();
  // SFT data: rank 0 prepares data.jsonl (unless already current), then all
  // ranks meet, so every rank opens complete files.
  Status PrepareData();
  // trainer_eval.cc: eval.data prepared and opened on every rank (no-op without eval:).
  Status PrepareEvalData();
  bool EvalDue(int64_t step) const;
  // checkpoint.every_steps says to save after `step` (and after the last step).
  bool CheckpointDue(int64_t step) const {
    return job_.checkpoint.every_steps > 0 && (step % job_.checkpoint.every_steps == 0 || step == job_.train.steps);
  }
  // The memory tier's folder a resume may read: "" for none, for a per-host
  // tier under resume: auto, and for a folder owned_dir.h refuses (a warning).
  std::string ResumeMemoryDir() const;
  // checkpoint.memory.every_steps says to save to the memory tier after
  // `step`, and no disk save is due then (a step due in both goes to disk).
  bool MemoryCheckpointDue(int64_t step) const {
    return !memory_dir_.empty() && step % job_.checkpoint.memory.every_steps == 0 && !CheckpointDue(step);
  }
  Manifest RunState() const;
  // Global rows [first_row, first_row + count) of the planned batch to the device.
  void LoadRows(int64_t first_row, int64_t count);

  // The parts of Step (trainer_step.cc).
  // What the step's all-ranks reduction says.
  struct StepSums {
    double loss_sum = 0;   // over all ranks
    double norm = 0;       // the unscaled gradient norm (NaN when another replica's was not finite)
    bool nonfinite = false;
  };
  // This rank's micro-batches, forward and backward; its loss sum.
  StatusOr<double> ForwardBackward(float grad_scale);
  // The gradients reduced, their norm, and one all-reduce of the loss, the
  // stop vote and the non-finite flags.
  StatusOr<StepSums> ReduceStep(double loss_sum, double loss_scale);
  // Clipping, the unscale and the optimizer step of what is trained.
  Status ApplyUpdate(double norm, double loss_scale, double lr);

  std::unique_ptr<Objective> objective_;  // what the step computes (objective.h): SFT or a preference loss

  JobConfig job_;
  // train.precision with auto resolved for this backend (Init); job_ stays as written.
  Precision precision_ = Precision::kFp32;
  DistContext dist_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<FsdpRuntime> runtime_;
  // parallel.context_parallel > 1: this rank's CP group (cp_group.h); null at C = 1.
  std::unique_ptr<CpGroup> cp_;
  int cp_size() const { return job_.parallel.context_parallel; }
  std::unique_ptr<OptimizerState> optimizer_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<Trainable> trainable_;  // what is trained: the whole model, or LoRA adapters
  // The HF weights' values (base_weights_hash.h), every rank's sum: a peft:
  // job's base, or a dpo/ipo full fine-tune's starting weights; 0 otherwise.
  uint64_t base_weights_hash_ = 0;
  int shard_count_ = 1;
  int64_t samples_seen_ = 0;  // global sampler cursor
  int64_t tokens_seen_ = 0;   // non-padding positions trained on, all ranks
  std::unique_ptr<BatchSource> data_;
  std::unique_ptr<PreparedDataset> eval_data_;  // eval.data, prepared (null without eval:)
  int64_t step_ = 0;
  int64_t optimizer_steps_ = 0;
  std::unique_ptr<LossScaler> scaler_;
  bool stop_agreed_ = false;  // some rank asked to stop at this step
  bool stopped_ = false;
  RunKeys run_keys_;            // what defines this run (run_fingerprint.h)
  ResumeChoice resume_;         // checkpoint.resume resolved in Init ("" step_dir = from scratch)
  std::string resumed_from_;    // the step directory resumed from, "" = none
  CheckpointTier resumed_tier_ = CheckpointTier::kDisk;
  std::string source_config_;   // model.from_hf's config.json as read ("" for a preset), for export
  std::string memory_dir_;      // the memory tier's job folder ("" = no memory tier)
  bool nothing_trained_ = false;
  // Host staging and device copies of one micro-batch.
  std::vector<int32_t> h_tokens_, h_targets_, h_pos_, h_seg_;
  DeviceBuffer d_tokens_, d_targets_, d_pos_, d_seg_;
  // MoE (shard/model/moe_mlp.h): the aux-loss coefficient in effect (0: none),
  // this step's gradient factor for it, and the micro-batch's real-row mask.
  double moe_aux_coef_ = 0;
  float moe_aux_scale_ = 0;
  double moe_z_coef_ = 0;  // the router z-loss's (moe.z_loss_coef)
  float moe_z_scale_ = 0;
  std::vector<uint8_t> h_real_;
  // The loaded micro-batch's real-token mask (padding: a segment without
  // targets), from `rows` whole sequences before a CP split, then this rank's
  // chunks of it; RealRows: null when every row is real (token windows).
  void MarkRealRows(int64_t rows);
  const uint8_t* RealRows() const { return h_real_.empty() ? nullptr : h_real_.data(); }
};

}  // namespace shard
