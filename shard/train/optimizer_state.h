// Where this rank's AdamW state lives and how one optimizer step runs over it.
//
//   on the device (default): the moments m, v are FsdpRuntime's moment shards
//     and AdamW runs on the training backend, in place on the parameter shard.
//   offloaded (parallel.offload_optimizer: true): an fp32 master copy of the
//     parameter shard and m, v live in host memory (page-locked on CUDA, from
//     Backend::AllocateHost); the device keeps only its parameter shard — in
//     the compute dtype under train.precision bf16/fp16 (2 B/param: the master
//     is cast on the host, by the CPU backend, before each upload), fp32 under
//     fp32 precision (the
//     all-gathers read it) and no gradient shard: the FSDP runtime copies each
//     reduce-scatter result down as it lands and adds it into a host fp32
//     gradient shard owned here (FsdpOptions::grads_on_device = false,
//     FsdpRuntime::AttachHostGrads). Each step runs AdamW on the master and
//     the host gradients and copies the master back into the device parameter
//     shard, unit by unit, pipelined: unit u's host AdamW (on a helper thread)
//     overlaps the copy of unit u-1's master up.
//
// The host arithmetic runs on a private CPU backend (CreateBackend("cpu")): the
// same vectorised, multi-threaded AdamW kernel as device: cpu, so on the CPU an
// offloaded run is bitwise a non-offloaded one, and core code still includes no
// backend header. The gradient copies down happen during the backward pass,
// off the compute thread (the runtime's staging ring and host worker, see
// fsdp_runtime.h); AdamW waits for the global gradient norm (clipping), so it
// runs once every gradient is final. host_ is shared with the runtime's host
// worker: this class uses it only after FsdpRuntime::DrainHostGrads.
//
// Checkpoints hold the same bytes either way (params = the master, m, v), so a
// run saved offloaded resumes non-offloaded and vice versa.
//
// optim.state_dtype: bf16 (offloaded only): master, m and v are held as bf16
// (6 B/param instead of 12; the host gradient shard stays fp32) and updated by
// AdamWSliceBf16 with stochastic rounding seeded by train.seed
// (shard/optim/bf16_state.h). The device shard is the bf16 master as is (bf16
// precision) or widened / cast from it. ReadShard and master() widen to fp32
// (exact); WriteShard and WriteParams round fp32 to nearest (exact for values
// that came from bf16, so a checkpoint round trip is bitwise).
//
// Thread-safety: called from the training thread only; Step runs the host
// AdamW on a helper thread of its own and joins it before returning.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/spec/param_layout.h"
#include "shard/spec/optim_config.h"

namespace shard {

struct OptimStateOptions {
  DType state_dtype = DType::kF32;  // optim.state_dtype: kF32 or kBF16 (offloaded only)
  uint64_t seed = 0;                // train.seed: the stochastic rounding's draws
};

class OptimizerState {
 public:
  // `runtime` must have been created with moments_on_device == grads_on_device
  // == !offload (offload attaches the host gradient shards to it), and a
  // two-byte param_shard_dtype only when offloaded. An fp32 parameter shard's
  // current values become the master; a two-byte one needs WriteParams.
  // `device` and `runtime` must outlive this object.
  static StatusOr<std::unique_ptr<OptimizerState>> Create(Backend* device, FsdpRuntime* runtime, bool offload,
                                                          const OptimStateOptions& options = {});

  // Drains the runtime's host worker first: it may still be adding into the
  // gradient shards this object owns, with host_.
  ~OptimizerState();

  bool offloaded() const { return offload_; }
  // How master, m and v are held (optim.state_dtype).
  DType state_dtype() const { return options_.state_dtype; }
  // The training backend (the checkpointer asks it whether buffers hold data).
  Backend* device() const { return device_; }

  // One AdamW step over every unit's shard once the gradients are final
  // (after FsdpRuntime::FinishGradients): `clip` multiplies the gradients
  // first, `step` is the 1-based step for bias correction. Returns with the
  // device parameter shards updated.
  Status Step(const ParamLayout& layout, const OptimConfig& config, float lr, int64_t step, float clip);

  // The first n elements of unit u's parameter shard (the master when
  // offloaded), m and v, copied to host memory (checkpoint snapshots, tests),
  // widened to fp32 from bf16 state.
  void ReadShard(int u, int64_t n, float* params, float* m, float* v);
  // The same as held: n elements of state_dtype() each (checkpoint snapshots).
  void ReadShardHeld(int u, int64_t n, void* params, void* m, void* v);
  // Unit u's host master (which = 0), m (1) or v (2) as held, in
  // state_dtype(); null when not offloaded. What a synchronous checkpoint
  // writes without a copy.
  const void* held(int u, int which) const;
  // Sets unit u's whole shard (layout(u).shard_numel elements each) from host
  // memory: the device parameter shard, and the master, m and v (resume).
  void WriteShard(int u, const float* params, const float* m, const float* v);
  // Sets only unit u's parameters (initial weights): the master when
  // offloaded, and the device shard (cast on the host when it is two-byte).
  void WriteParams(int u, const float* params);
  // Unit u's fp32 master shard in host memory; null when not offloaded (the
  // device shard is the master then). bf16 state: the master widened into a
  // scratch buffer, valid until the next call.
  const float* master(int u) const;
  // Unit u's fp32 AdamW moments in host memory when offloaded fp32 state (null otherwise).
  const float* host_m(int u) const { return offload_ && !bf16() ? shards_[u].m.data() : nullptr; }
  const float* host_v(int u) const { return offload_ && !bf16() ? shards_[u].v.data() : nullptr; }

  // Device bytes held by the optimizer state beyond the parameter shard the
  // model needs anyway: m and v (0 when offloaded).
  int64_t device_bytes() const { return runtime_->moment_device_bytes(); }
  // Device bytes of the persistent parameter and gradient shards (the gradient
  // shards are 0 when offloaded: they live on the host).
  int64_t param_shard_device_bytes() const { return runtime_->param_shard_device_bytes(); }
  int64_t grad_shard_device_bytes() const { return runtime_->grad_shard_device_bytes(); }
  // Host bytes held: master, m, v, the gradient shard, the runtime's gradient
  // staging ring (FsdpRuntime::kHostStages buffers of the largest unit's
  // shard) and the two-byte parameter stages (0 on device).
  int64_t host_bytes() const { return host_bytes_; }
  // Wall seconds of the last Step (including the copies when offloaded).
  double last_step_seconds() const { return last_step_seconds_; }

 private:
  struct HostShard {
    HostBuffer master, m, v, grad;  // grad: the runtime accumulates into it (AttachHostGrads)
  };
  OptimizerState(Backend* device, FsdpRuntime* runtime, bool offload, const OptimStateOptions& options)
      : device_(device), runtime_(runtime), offload_(offload), options_(options) {}
  bool bf16() const { return options_.state_dtype == DType::kBF16; }
  // Create's parts: the runtime built to match `offload` and the state dtype;
  // the host master, m, v and gradient shards (offloaded); the staging
  // buffers of the uploads, sized for the largest unit shard.
  static Status CheckRuntime(FsdpRuntime& runtime, bool offload, const OptimStateOptions& options);
  Status AllocateHostShards(bool data, int64_t* largest);
  Status AllocateStages(int64_t largest);
  // bf16 state: host bf16 views of a unit's master, m, v.
  uint16_t* held16(int u, int which) const;
  // bf16 state: unit u's device shard contents, made from its bf16 master in
  // pipeline slot `slot` (the master itself under bf16 precision).
  const void* Bf16Upload(int u, int slot);

  Backend* device_;
  FsdpRuntime* runtime_;
  bool offload_;
  OptimStateOptions options_;
  std::unique_ptr<Backend> host_;  // the CPU backend doing the offloaded arithmetic
  std::vector<HostShard> shards_;  // per unit, offloaded only
  HostBuffer lowp_stage_[2];       // two-byte device shard: the master cast down, per pipeline slot
  HostBuffer wide_stage_[2];       // bf16 state under fp32/fp16 precision: the master widened, per slot
  mutable std::vector<float> master_f32_;  // master(u)'s widened copy (bf16 state)
  int64_t host_bytes_ = 0;
  double last_step_seconds_ = 0;
};

}  // namespace shard
