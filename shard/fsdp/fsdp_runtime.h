// The FSDP runtime: owns this rank's shards of every unit (fp32 parameters,
// gradients, and AdamW moments unless the optimizer state is offloaded to the
// host — shard/train/optimizer_state.h) and implements UnitAccess for the model — gathering
// a unit before use, freeing it after, reduce-scattering its gradients into the
// owner shard — with the next unit's all-gather and the previous unit's
// reduce-scatter overlapping compute on a communication thread.
//
// Ranks form S-sized shard groups replicated R times (world = S * R):
//   full_shard     S = world, R = 1   gather in forward and again in backward
//   shard_grad_op  S = world, R = 1   keep gathered units from forward to backward
//   no_shard       S = 1,     R = world  (DDP: full copies, gradients all-reduced)
//   hybrid_shard   S = group, R = world / group
// Gradients are summed over all ranks (the loss is already normalised by the
// global target count), within shard groups by reduce-scatter per micro-batch
// and across replicas by one all-reduce of the shard per step.
//
// Mixed precision (param_dtype / reduce_dtype bf16 or fp16): the fp32 shard
// stays the master. Before an all-gather the shard is cast into its slot of a
// two-byte gather buffer and the all-gather moves two-byte values; on acquire
// the unit is widened to an fp32 compute copy — or, with
// two_byte_compute_copy (the trainer's setting), the gathered buffer itself
// is the compute copy (ParamsDType), whose matrices the model's GEMMs take as
// two-byte B operands. Unsharded units get the same rounded weights, so every
// strategy computes with the same weights. With a two-byte
// reduce_dtype the full gradient is cast down before the reduce-scatter (freeing
// the fp32 buffer at once), reduced on the wire in that type (fp32 adds per hop,
// see Communicator::ReduceScatter), and widened into the fp32 gradient shard.
// The replicas' all-reduce (no_shard, hybrid_shard) stays fp32.
//
// On a device backend the comm thread's collectives are ordered after the
// compute stream by events recorded when each is queued (CommOptions::
// ready_event): the all-gather of the next unit waits only for the work that
// produced its inputs, not for the compute queued since.
//
// Gradients kept in host memory (optimizer offload, grads_on_device false)
// flow down off the compute thread: each reduce-scatter result is queued as an
// asynchronous device->host copy into one of a small ring of pinned staging
// buffers, and a host worker thread waits for the copy (a BackendEvent) and
// adds the stage into the host gradient shard. The compute thread blocks only
// when every stage is still busy, and drains the worker wherever it reads or
// writes host gradients itself (ZeroGrads, an unsharded unit's GradBuffer,
// FinishGradients, GradNormSquared, DrainHostGrads for the optimizer step).
//
// Knows nothing of attention or Llama: units are flat buffers of given sizes.
// Thread-safety: one compute thread calls everything; the communication thread
// and the host worker are internal. The attached host backend is used by the
// host worker while gradients flow, and by the compute thread only after
// draining it, so it is never used by two threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/comm/communicator.h"
#include "shard/fsdp/comm_thread.h"
#include "shard/fsdp/frozen_base.h"
#include "shard/fsdp/fsdp_options.h"
#include "shard/fsdp/nf4_shard.h"
#include "shard/spec/shard_layout.h"
#include "shard/spec/unit_access.h"

namespace shard {

class FsdpRuntime : public UnitAccess {
 public:
  // unit_numels: real sizes of the units. shard_comm may be null when the shard
  // group has one rank; replicate_comm may be null when there is one replica.
  static StatusOr<std::unique_ptr<FsdpRuntime>> Create(Backend* backend, const std::vector<int64_t>& unit_numels,
                                                       const FsdpOptions& options,
                                                       std::unique_ptr<Communicator> shard_comm,
                                                       std::unique_ptr<Communicator> replicate_comm);
  ~FsdpRuntime() override;

  int num_units() const { return static_cast<int>(units_.size()); }
  const ShardLayout& layout(int unit) const { return units_[unit].layout; }
  int shard_rank() const { return shard_rank_; }
  // This rank's shards (size layout(u).shard_numel). The parameter shard holds
  // param_shard_dtype() values: two-byte ones behind the float* when that is
  // bf16/fp16 (shard_numel * 2 bytes).
  float* param_shard(int u) { return units_[u].params.data(); }
  DType param_shard_dtype() const { return options_.param_shard_dtype; }
  // The device gradient shard; aborts (naming the unit) when the gradients live
  // on the host (grads_on_device false): use host_grad_shard then.
  float* grad_shard(int u);
  // The host gradient shard when !grads_on_device; aborts otherwise. Its
  // contents are final only after FinishGradients (or DrainHostGrads): copies
  // and adds into it may still be in flight on the host worker before that.
  float* host_grad_shard(int u);
  bool grads_on_host() const { return !options_.grads_on_device; }
  bool frozen() const { return options_.frozen; }
  // QLoRA: whether unit u's shard is an NF4 record, and its format.
  bool quantized(int u) const { return frozen_ && frozen_->quantized(u); }
  const Nf4ShardFormat& nf4_format(int u) const { return frozen_->format(u); }
  // A frozen base's shard of unit u from this rank's fp32 values (host
  // memory), stored as the runtime keeps it: quantised to NF4 (on the host),
  // cast to a two-byte param_shard_dtype, or copied. Once, at load.
  Status WriteFrozenShard(int u, const float* host_shard);
  // Under !grads_on_device, before the first micro-batch: the host gradient
  // shards (one per unit, layout(u).shard_numel floats, owned by the caller,
  // from the device backend's AllocateHost: unsharded units' gradients are
  // copied straight into them asynchronously, which needs pinned memory on
  // CUDA), and a CPU backend for the host adds and sums, which the host worker
  // uses: the caller may use it only after DrainHostGrads. Both must outlive
  // this runtime. The runtime allocates its staging ring here (kHostStages
  // pinned buffers of the largest shard, host_stage_bytes()).
  Status AttachHostGrads(Backend* host, std::vector<float*> grads);
  // Waits until every queued gradient copy down and host add has finished;
  // returns the first error. Until the next micro-batch the host shards and
  // the host backend are then the caller's (the optimizer step calls it).
  // OK and immediate when the gradients live on the device.
  Status DrainHostGrads();
  // Staging buffers for gradients on their way down: how many, their bytes in
  // all (0 before AttachHostGrads), and how often the compute thread had to
  // wait for one to come free (every stage still being added on the host).
  static constexpr int kHostStages = 2;
  int64_t host_stage_bytes() const;
  int64_t host_stage_stalls() const { return host_stage_stalls_; }
  // Device bytes held by the parameter and gradient shards (persistent, not
  // the transient gathered or landing buffers).
  int64_t param_shard_device_bytes() const;
  int64_t grad_shard_device_bytes() const;
  // The AdamW moment shards on the device; null when !moments_on_device.
  float* adam_m(int u) { return units_[u].m.data(); }
  float* adam_v(int u) { return units_[u].v.data(); }
  // Device bytes held by the moment shards (0 when !moments_on_device).
  int64_t moment_device_bytes() const;

  // Step protocol: ZeroGrads; per micro-batch Begin/ (model) /Finish; then
  // FinishGradients before reading gradients.
  void ZeroGrads();
  void BeginMicroBatch();
  Status FinishMicroBatch();
  Status FinishGradients();
  // Sum of squared gradients over the whole model (all ranks agree).
  StatusOr<double> GradNormSquared();
  // Sums `data` over every rank of the world (shard group, then replicas).
  Status AllReduceSum(double* data, int64_t count);
  // The same for floats in backend memory (LoRA adapter gradients, which
  // every rank holds whole).
  Status AllReduceSumFloats(float* data, int64_t count);
  // Writes unit u's full unpadded parameters (gathered from the shard group) to `out`.
  // `host_master`: this rank's fp32 shard in host memory, gathered instead of
  // the device shard; required when the device shard is two-byte (it holds
  // only the rounded weights) unless the base is frozen (then the rounded
  // weights are the base: widened), otherwise optional (null: the device shard).
  // NF4 units give their dequantised values. `out` null: this rank takes part
  // in the collective and keeps nothing (the ranks that do not write an export).
  Status GatherUnit(int u, std::vector<float>* out, const float* host_master = nullptr);

  // UnitAccess.
  StatusOr<const float*> AcquireParams(int unit) override;
  DType ParamsDType(int unit) const override;
  Status ReleaseParams(int unit) override;
  StatusOr<float*> GradBuffer(int unit) override;
  // A sharded unit under a two-byte reduce_dtype: the reduce_dtype buffer the
  // reduce-scatter sends (padding zeroed), so the unit never has an fp32 full
  // gradient; otherwise GradBuffer.
  StatusOr<void*> GradBufferStoreOnce(int unit, DType* dtype) override;
  Status GradsDone(int unit) override;

  // Bytes currently held in gathered parameter and full-gradient buffers (for
  // memory tests): shards are not counted.
  int64_t transient_bytes() const { return transient_bytes_; }
  int64_t peak_transient_bytes() const { return peak_transient_bytes_; }
  // Seconds the compute thread spent waiting on communication.
  double comm_wait_seconds() const { return comm_wait_seconds_; }

 private:
  struct Unit {
    ShardLayout layout;
    DeviceBuffer params, grads, m, v;  // shards
    DeviceBuffer full;                 // gathered fp32 parameters while held (or prefetched, fp32)
    DeviceBuffer full_lp;              // param_dtype (or NF4 record) gather buffer until widened into `full`;
                                       // the compute copy itself under two_byte_compute_copy
    DeviceBuffer grad_lp;              // reduce_dtype gradient on the reduce-scatter wire
    DeviceBuffer full_grad;            // unreduced gradient while accumulating / reducing
    DeviceBuffer rs_out;               // reduce-scatter landing buffer
    int holds = 0;
    bool gathered = false;             // `full` holds valid data once gather_ticket completes
    CommThread::Ticket gather_ticket = 0;
    CommThread::Ticket rs_ticket = 0;
    bool keep_until_grads = false;     // shard_grad_op: gathered in forward, kept for backward
    int releases = 0;                  // outermost releases this micro-batch (frozen shard_grad_op)
    bool grads_done = false;           // GradsDone seen in this micro-batch
  };

  FsdpRuntime(Backend* backend, const FsdpOptions& options) : backend_(backend), options_(options) {}
  bool sharded() const { return shard_size_ > 1; }
  bool lowp_params() const { return options_.param_dtype != DType::kF32; }
  bool lowp_shard() const { return options_.param_shard_dtype != DType::kF32; }
  bool lowp_grads() const { return options_.reduce_dtype != DType::kF32; }
  // Compute copies are two-byte (two_byte_compute_copy): full_lp, the shard
  // itself, or (NF4) `full` holding the two-byte decode.
  bool lowp_compute() const { return options_.two_byte_compute_copy && lowp_params(); }
  // Makes units_[u].full the fp32 compute copy (widening the gathered two-byte
  // values, or rounding the unsharded master) — or, for an unsharded unit
  // under two_byte_compute_copy, full_lp the rounded master; a no-op once done.
  Status EnsureComputeCopy(int u);
  // Adds a finished reduce-scatter into the gradient shard and frees its buffers.
  Status FoldReduced(int u);
  // Queues the addition of n device floats at `src` into unit u's host
  // gradient shard: an asynchronous copy into the next free stage, then the
  // add on the host worker. `src` may be freed at once (see CopyToHostAsync).
  Status AddToHostGrads(int u, const float* src, int64_t n);
  Status CheckHostGrads() const;
  Status StartGather(int u);
  // options_.comm for a collective the comm thread runs: ordered (nccl) after
  // `ready`, recorded on the compute stream when the call was queued — not
  // after the compute queued by the time the comm thread gets to it;
  // tagged with the unit for the flight recorder.
  CommOptions CallOptions(const BackendEvent& ready, int unit) const;
  // options_.comm for a call on the caller's thread (export, checkpoint
  // gathers): tagged with the unit for the flight recorder.
  CommOptions UnitOptions(int unit) const;
  Status WaitTicket(CommThread::Ticket t);
  void FreeFull(int u);
  void Track(int64_t delta_bytes);
  void Prefetch(int after_unit);

  Backend* backend_;
  FsdpOptions options_;
  std::unique_ptr<Communicator> shard_comm_, replicate_comm_;
  int shard_size_ = 1, shard_rank_ = 0;
  std::vector<Unit> units_;
  std::unique_ptr<CommThread> comm_;
  // Recorded order of outermost AcquireParams calls of the first micro-batch;
  // later micro-batches prefetch the entry after the current one.
  std::vector<int> order_;
  bool recording_ = true;
  size_t cursor_ = 0;
  bool in_order_ = true;
  int64_t transient_bytes_ = 0, peak_transient_bytes_ = 0;
  double comm_wait_seconds_ = 0;
  // !grads_on_device: see AttachHostGrads. host_dirty_[u]: the host shard holds
  // gradients of an earlier micro-batch (an unsharded unit loads them first).
  // host_ticket_[u]: the last host-worker task that writes unit u's host shard
  // (0: none); stage_ticket_[s]: the last one reading stage s. All are touched
  // by the compute thread only; the worker sees only what a task captured.
  Backend* host_ = nullptr;
  std::vector<float*> host_grads_;
  std::vector<bool> host_dirty_;
  std::vector<HostBuffer> host_stages_;
  std::vector<CommThread::Ticket> stage_ticket_;
  std::vector<CommThread::Ticket> host_ticket_;
  int next_stage_ = 0;
  int64_t host_stage_stalls_ = 0;
  // A FIFO executor (the same class as comm_, a second instance): waits for
  // each copy down and adds it on the host. Declared last: destroyed (joined)
  // before the stages it reads.
  std::unique_ptr<CommThread> host_worker_;
  // A frozen base's storage (frozen_base.h; options.frozen), else null.
  std::unique_ptr<FrozenBase> frozen_;
};

}  // namespace shard
