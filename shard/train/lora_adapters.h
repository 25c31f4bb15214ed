// The trainable side of a LoRA job: every rank holds all adapters (A and B of
// each targeted linear of each layer — MBs, not GBs) with their gradients and
// AdamW moments, in backend memory. The frozen base stays sharded in the FSDP
// runtime (FsdpOptions::frozen). Per step the adapter gradients are summed
// over the world in one all-reduce (DDP for the adapters), so every rank takes
// the same AdamW step and the replicas never drift.
//
// Thread-safety: the training thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/model/lora_linear.h"
#include "shard/spec/optim_config.h"
#include "shard/spec/peft_config.h"

namespace shard {

class LoraAdapters {
 public:
  // Fresh adapters per peft.init (A random, B zero), a pure function of seed.
  static StatusOr<std::unique_ptr<LoraAdapters>> Create(Backend* backend, const LlamaConfig& config,
                                                        const PeftConfig& peft, uint64_t seed);

  // What the model binds (LlamaModel::SetLora); stable for this object's life.
  LoraBinding* binding() { return &binding_; }
  const LoraLayout& layout() const { return binding_.layout; }
  int64_t numel() const { return binding_.layout.total_numel(); }
  Backend* backend() const { return backend_; }
  // Backend bytes: parameters, gradients and both moments.
  int64_t device_bytes() const { return 4 * numel() * static_cast<int64_t>(sizeof(float)); }

  void ZeroGrads();
  // Sums the gradients over every rank (FsdpRuntime::AllReduceSumFloats).
  Status ReduceGrads(FsdpRuntime& runtime);
  // Sum of squared gradients (identical on every rank after ReduceGrads).
  double GradNormSquared();
  // One AdamW step (weight decay applies to A and B, as PEFT trains them).
  void Step(const OptimConfig& config, float lr, int64_t step, float grad_scale);

  // Layer l's parameters to / from host memory (layout().layer_numel floats).
  void ReadLayer(int l, float* host) const;
  void WriteLayer(int l, const float* host);
  // The whole state (numel() floats each) to / from host memory: checkpoints.
  void ReadState(float* params, float* m, float* v) const;
  void WriteState(const float* params, const float* m, const float* v);

 private:
  explicit LoraAdapters(Backend* backend) : backend_(backend) {}
  Backend* backend_;
  LoraBinding binding_;
  // One flat buffer each over all layers (layer l at l * layer_numel), so the
  // reduction and the step are one call each.
  DeviceBuffer params_, grads_, m_, v_;
};

}  // namespace shard
