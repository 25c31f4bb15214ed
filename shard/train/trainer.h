// The training loop: data → micro-batches → model forward/backward → clipped
// AdamW → metrics, and an HF export at the end. Single process for now (the
// FSDP runtime will replace LocalParams behind the same UnitAccess seam).
//
// Thread-safety: one thread drives a Trainer.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/data/sampler.h"
#include "shard/data/token_windows.h"
#include "shard/model/llama_model.h"
#include "shard/train/job_config.h"
#include "shard/train/local_params.h"
#include "shard/tensor/dtype.h"

namespace shard {

struct StepMetrics {
  int64_t step = 0;         // 1-based: the number of optimizer steps done
  double loss = 0;          // mean cross-entropy per target token of this step's global batch
  double lr = 0;
  double grad_norm = 0;     // before clipping
  int64_t tokens = 0;       // target tokens in the global batch
  double seconds = 0;       // wall time of the step
};

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Create(const JobConfig& job);

  // Runs the remaining steps; calls on_step after each (may be empty).
  Status Run(const std::function<void(const StepMetrics&)>& on_step = {});
  // One optimizer step.
  StatusOr<StepMetrics> Step();
  // Writes the current weights as an HF folder.
  Status ExportHf(const std::string& dir, DType dtype);

  int64_t step() const { return step_; }
  const LlamaConfig& model_config() const { return model_->config(); }
  const ParamLayout& layout() const { return model_->layout(); }
  LocalParams& params() { return *params_; }

 private:
  explicit Trainer(const JobConfig& job) : job_(job) {}
  Status Init();
  Status LoadMicroBatch(int64_t first_pos, int64_t count);

  JobConfig job_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<LocalParams> params_;
  std::vector<DeviceBuffer> adam_m_, adam_v_;
  std::unique_ptr<TokenWindows> data_;
  std::unique_ptr<Sampler> sampler_;
  int64_t step_ = 0;
  // Host staging and device copies of one micro-batch.
  std::vector<int32_t> h_tokens_, h_targets_, h_pos_;
  DeviceBuffer d_tokens_, d_targets_, d_pos_;
};

}  // namespace shard
