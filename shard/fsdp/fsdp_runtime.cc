#include "shard/fsdp/fsdp_runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "shard/common/logging.h"

namespace shard {
namespace {
// A caller asked for the gradient shard on the wrong side of the PCIe bus: a
// programming error, so it stops the process (on stderr, where death tests and
// crash logs look) instead of handing out a pointer that reads stale memory.
[[noreturn]] void WrongGradSide(const std::string& what) {
  LOG_ERROR("{}", what);
  std::fprintf(stderr, "%s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Floats a DeviceBuffer needs to hold n two-byte elements.
int64_t TwoByteFloats(int64_t n) { return (n + 1) / 2; }
}  // namespace

StatusOr<std::unique_ptr<FsdpRuntime>> FsdpRuntime::Create(Backend* backend, const std::vector<int64_t>& numels,
                                                            const FsdpOptions& options,
                                                            std::unique_ptr<Communicator> shard_comm,
                                                            std::unique_ptr<Communicator> replicate_comm) {
  if (options.param_shard_dtype != DType::kF32 && options.param_shard_dtype != options.param_dtype)
    return InvalidArgument(std::string("FSDP runtime: a ") + DTypeName(options.param_shard_dtype) +
                           " parameter shard needs param_dtype " + DTypeName(options.param_shard_dtype) + ", not " +
                           DTypeName(options.param_dtype));
  if (!options.nf4_units.empty() && (!options.frozen || options.nf4_units.size() != numels.size()))
    return InvalidArgument("FSDP runtime: NF4 units need a frozen base and one entry per unit (" +
                           std::to_string(options.nf4_units.size()) + " for " + std::to_string(numels.size()) + ")");
  std::unique_ptr<FsdpRuntime> rt(new FsdpRuntime(backend, options));
  rt->shard_size_ = shard_comm ? shard_comm->world_size() : 1;
  rt->shard_rank_ = shard_comm ? shard_comm->rank() : 0;
  rt->shard_comm_ = std::move(shard_comm);
  rt->replicate_comm_ = std::move(replicate_comm);
  rt->units_.resize(numels.size());
  if (options.frozen)  // the frozen base's storage (frozen_base.h), as the model converters set it
    rt->frozen_ = std::make_unique<FrozenBase>(backend, rt->shard_comm_.get(), rt->shard_size_, rt->shard_rank_,
                                               options.param_dtype, options.param_shard_dtype, options.nf4_units,
                                               options.nf4);
  for (size_t u = 0; u < numels.size(); ++u) {
    Unit& x = rt->units_[u];
    const bool nf4 = rt->quantized(static_cast<int>(u));
    // NF4 shards start on block boundaries, so the blocks do not depend on the sharding.
    ASSIGN_OR_RETURN(x.layout, ComputeShardLayout(numels[u], rt->shard_size_, nf4 ? rt->frozen_->block_size() : 4));
    const int64_t n = x.layout.shard_numel;
    if (nf4) {
      RETURN_IF_ERROR(rt->frozen_->InitQuantized(static_cast<int>(u), x.layout, &x.params));
      continue;
    }
    for (DeviceBuffer* b : {&x.params, &x.grads, &x.m, &x.v}) {
      if (!options.moments_on_device && (b == &x.m || b == &x.v)) continue;
      if (!options.grads_on_device && b == &x.grads) continue;
      if (options.frozen && b != &x.params) continue;  // no gradient, no optimizer state
      const bool two_byte = b == &x.params && options.param_shard_dtype != DType::kF32;
      const int64_t floats = two_byte ? TwoByteFloats(n) : n;
      ASSIGN_OR_RETURN(*b, DeviceBuffer::Create(backend, floats));
      backend->Fill(b->data(), floats, 0.0f);  // all-zero bits: 0 in bf16/fp16 too
    }
  }
  rt->comm_ = std::make_unique<CommThread>();
  return rt;
}

FsdpRuntime::~FsdpRuntime() {
  if (comm_) (void)comm_->Drain();
  if (host_worker_) (void)host_worker_->Drain();  // before the stages and shards it writes go
}

Status FsdpRuntime::WriteFrozenShard(int u, const float* host_shard) {
  if (!frozen_) return Internal("WriteFrozenShard: unit " + std::to_string(u) + " is not frozen");
  return frozen_->Write(u, units_[u].layout, host_shard, units_[u].params.data());
}

float* FsdpRuntime::grad_shard(int u) {
  if (!options_.grads_on_device)
    WrongGradSide("FsdpRuntime::grad_shard(" + std::to_string(u) +
                  "): the gradient shards live in host memory under parallel.offload_optimizer; use host_grad_shard");
  return units_[u].grads.data();
}

float* FsdpRuntime::host_grad_shard(int u) {
  if (options_.grads_on_device || static_cast<size_t>(u) >= host_grads_.size())
    WrongGradSide("FsdpRuntime::host_grad_shard(" + std::to_string(u) + "): " +
                  (options_.grads_on_device ? "the gradient shards are on the device; use grad_shard"
                                            : "no host gradient shards attached (OptimizerState::Create attaches them)"));
  return host_grads_[u];
}

int64_t FsdpRuntime::param_shard_device_bytes() const {
  int64_t bytes = 0;
  for (const auto& x : units_) bytes += x.params.size() * static_cast<int64_t>(sizeof(float));
  return bytes;
}

int64_t FsdpRuntime::grad_shard_device_bytes() const {
  int64_t bytes = 0;
  for (const auto& x : units_) bytes += x.grads.size() * static_cast<int64_t>(sizeof(float));
  return bytes;
}

int64_t FsdpRuntime::moment_device_bytes() const {
  int64_t bytes = 0;
  for (const auto& x : units_) bytes += (x.m.size() + x.v.size()) * static_cast<int64_t>(sizeof(float));
  return bytes;
}

void FsdpRuntime::Track(int64_t delta) {
  transient_bytes_ += delta;
  peak_transient_bytes_ = std::max(peak_transient_bytes_, transient_bytes_);
}

CommOptions FsdpRuntime::CallOptions(const BackendEvent& ready, int unit) const {
  CommOptions o = options_.comm;
  o.ready_event = ready.native_handle();
  o.unit = unit;
  return o;
}

CommOptions FsdpRuntime::UnitOptions(int unit) const {
  CommOptions o = options_.comm;
  o.unit = unit;
  return o;
}

Status FsdpRuntime::WaitTicket(CommThread::Ticket t) {
  if (t == 0 || comm_->Done(t)) return comm_->Wait(t);
  auto t0 = std::chrono::steady_clock::now();
  Status st = comm_->Wait(t);
  comm_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

Status FsdpRuntime::StartGather(int u) {
  Unit& x = units_[u];
  if (quantized(u)) {  // the packed records travel; FrozenBase::Decode widens them on acquire
    const int64_t n = frozen_->format(u).floats();
    ASSIGN_OR_RETURN(x.full_lp, DeviceBuffer::Create(backend_, n * shard_size_));
    Track(x.full_lp.size() * 4);
    x.gathered = true;
    std::shared_ptr<BackendEvent> ready = backend_->RecordEvent();
    x.gather_ticket = comm_->Enqueue([this, u, n, ready] {
      Unit& y = units_[u];
      return shard_comm_->AllGather(y.params.data(), y.full_lp.data(), n, CallOptions(*ready, u))
          .WithContext("NF4 all-gather of unit " + std::to_string(u));
    });
    return OkStatus();
  }
  if (lowp_params()) {
    const DType dt = options_.param_dtype;
    const int64_t n = x.layout.shard_numel;
    ASSIGN_OR_RETURN(x.full_lp, DeviceBuffer::Create(backend_, TwoByteFloats(x.layout.padded)));
    Track(x.full_lp.size() * 4);
    // Cast the master straight into our own slot, so the all-gather runs in
    // place; a two-byte shard is already the wire format: copied as is.
    char* own = reinterpret_cast<char*>(x.full_lp.data()) + static_cast<int64_t>(shard_rank_) * n * DTypeSize(dt);
    if (lowp_shard()) {
      backend_->Copy(own, x.params.data(), static_cast<size_t>(n) * DTypeSize(dt));
    } else {
      backend_->CastFromF32(x.params.data(), own, n, dt);
    }
    x.gathered = true;
    std::shared_ptr<BackendEvent> ready = backend_->RecordEvent();  // after the cast
    x.gather_ticket = comm_->Enqueue([this, u, own, n, dt, ready] {
      return shard_comm_->AllGather(own, units_[u].full_lp.data(), n, dt, CallOptions(*ready, u))
          .WithContext(std::string(DTypeName(dt)) + " all-gather of unit " + std::to_string(u));
    });
    return OkStatus();
  }
  ASSIGN_OR_RETURN(x.full, DeviceBuffer::Create(backend_, x.layout.padded));
  Track(x.layout.padded * 4);
  x.gathered = true;
  std::shared_ptr<BackendEvent> ready = backend_->RecordEvent();  // after the allocation of `full`
  x.gather_ticket = comm_->Enqueue([this, u, ready] {
    Unit& y = units_[u];
    return shard_comm_->AllGather(y.params.data(), y.full.data(), y.layout.shard_numel, CallOptions(*ready, u))
        .WithContext("all-gather of unit " + std::to_string(u));
  });
  return OkStatus();
}

Status FsdpRuntime::EnsureComputeCopy(int u) {
  Unit& x = units_[u];
  if (x.full.data()) return OkStatus();
  const DType dt = options_.param_dtype;
  if (lowp_compute() && !quantized(u)) {  // unsharded with an fp32 master: its rounded two-byte copy
    if (x.full_lp.data()) return OkStatus();
    const int64_t n = x.layout.numel;
    ASSIGN_OR_RETURN(x.full_lp, DeviceBuffer::Create(backend_, TwoByteFloats(n)));
    Track(x.full_lp.size() * 4);
    backend_->CastFromF32(x.params.data(), x.full_lp.data(), n, dt);
    x.gathered = true;
    x.gather_ticket = 0;
    return OkStatus();
  }
  if (quantized(u)) {  // decoded into an fp32 copy, or a two-byte one under two_byte_compute_copy
    const DType out = lowp_compute() ? dt : DType::kF32;
    ASSIGN_OR_RETURN(x.full, DeviceBuffer::Create(backend_, out == DType::kF32 ? x.layout.padded
                                                                               : TwoByteFloats(x.layout.padded)));
    Track(x.full.size() * 4);
    frozen_->Decode(u, x.layout, sharded() ? x.full_lp.data() : x.params.data(), x.full.data(), dt, out);
    if (sharded()) {
      Track(-x.full_lp.size() * 4);
      x.full_lp = DeviceBuffer();  // the backend orders the free after the decode
    } else {
      x.gathered = true;
      x.gather_ticket = 0;
    }
    return OkStatus();
  }
  if (sharded()) {  // widen the gathered two-byte values
    ASSIGN_OR_RETURN(x.full, DeviceBuffer::Create(backend_, x.layout.padded));
    Track(x.full.size() * 4);
    backend_->CastToF32(x.full_lp.data(), x.full.data(), x.layout.padded, dt);
    Track(-x.full_lp.size() * 4);
    x.full_lp = DeviceBuffer();  // the backend orders the free after the cast
    return OkStatus();
  }
  // Unsharded: round the master through a two-byte scratch, so this strategy
  // computes with exactly the weights a sharded one gathers.
  const int64_t n = x.layout.numel;
  if (lowp_shard()) {  // the shard is the rounded weights already: widen it
    ASSIGN_OR_RETURN(x.full, DeviceBuffer::Create(backend_, n));
    Track(x.full.size() * 4);
    backend_->CastToF32(x.params.data(), x.full.data(), n, dt);
    x.gathered = true;
    x.gather_ticket = 0;
    return OkStatus();
  }
  ASSIGN_OR_RETURN(DeviceBuffer scratch, DeviceBuffer::Create(backend_, TwoByteFloats(n)));
  ASSIGN_OR_RETURN(x.full, DeviceBuffer::Create(backend_, n));
  Track((scratch.size() + x.full.size()) * 4);
  backend_->CastFromF32(x.params.data(), scratch.data(), n, dt);
  backend_->CastToF32(scratch.data(), x.full.data(), n, dt);
  Track(-scratch.size() * 4);
  x.gathered = true;
  x.gather_ticket = 0;
  return OkStatus();
}

void FsdpRuntime::FreeFull(int u) {
  Unit& x = units_[u];
  if (!x.gathered) return;
  if (x.gather_ticket) (void)WaitTicket(x.gather_ticket);  // never free a buffer the comm thread is writing
  Track(-(x.full.size() + x.full_lp.size()) * 4);
  x.full = DeviceBuffer();
  x.full_lp = DeviceBuffer();
  x.gathered = false;
  x.keep_until_grads = false;
}

void FsdpRuntime::Prefetch(int after_unit) {
  if (!options_.prefetch || recording_ || !in_order_ || cursor_ >= order_.size()) return;
  int next = order_[cursor_];
  if (next == after_unit || units_[next].gathered) return;
  if (!StartGather(next).ok()) in_order_ = false;
}

StatusOr<const float*> FsdpRuntime::AcquireParams(int u) {
  if (u < 0 || u >= num_units()) return Internal("AcquireParams: no unit " + std::to_string(u));
  Unit& x = units_[u];
  if (x.holds == 0) {
    if (recording_) {
      order_.push_back(u);
    } else if (in_order_) {
      if (cursor_ < order_.size() && order_[cursor_] == u) {
        ++cursor_;
      } else {
        in_order_ = false;  // a different pass (e.g. evaluation): no prefetch until the next micro-batch
      }
    }
  }
  ++x.holds;
  // Where the compute copy is: a gathered (or rounded) two-byte unit's own
  // buffer, else `full` (fp32, or an NF4 unit's two-byte decode).
  const bool lowp = lowp_compute() && !quantized(u);
  if (!sharded()) {
    if (!lowp_params() && !quantized(u)) return static_cast<const float*>(x.params.data());
    if (lowp && lowp_shard()) return static_cast<const float*>(x.params.data());  // the rounded weights already
    RETURN_IF_ERROR(EnsureComputeCopy(u));
    return static_cast<const float*>(lowp ? x.full_lp.data() : x.full.data());
  }
  if (!x.gathered) RETURN_IF_ERROR(StartGather(u));
  RETURN_IF_ERROR(WaitTicket(x.gather_ticket));
  if ((lowp_params() && !lowp) || quantized(u)) RETURN_IF_ERROR(EnsureComputeCopy(u));
  if (x.holds == 1) Prefetch(u);
  return static_cast<const float*>(lowp ? x.full_lp.data() : x.full.data());
}

DType FsdpRuntime::ParamsDType(int u) const {
  return u >= 0 && u < num_units() && lowp_compute() ? options_.param_dtype : DType::kF32;
}

Status FsdpRuntime::ReleaseParams(int u) {
  Unit& x = units_[u];
  if (x.holds <= 0) return Internal("ReleaseParams: unit " + std::to_string(u) + " is not held");
  if (--x.holds > 0) return OkStatus();
  if (!sharded()) {
    if (lowp_params() || quantized(u)) FreeFull(u);  // the rounded (or dequantised) compute copy
    return OkStatus();
  }
  // Frozen: no GradsDone ever comes; the backward's release (the second) frees.
  if (options_.strategy == ShardStrategy::kShardGradOp && options_.frozen && ++x.releases < 2) {
    x.keep_until_grads = true;
    return OkStatus();
  }
  if (options_.strategy == ShardStrategy::kShardGradOp && !options_.frozen && !x.grads_done) {
    x.keep_until_grads = true;  // ZeRO-2: the backward pass reuses the forward's gather
    return OkStatus();
  }
  FreeFull(u);
  return OkStatus();
}

StatusOr<float*> FsdpRuntime::GradBuffer(int u) {
  if (options_.frozen)
    return FailedPrecondition("GradBuffer(" + std::to_string(u) + "): the base is frozen (LoRA): it has no gradients");
  Unit& x = units_[u];
  if (!sharded() && options_.grads_on_device) return x.grads.data();  // the shard is the whole unit: accumulate in place
  if (!sharded()) {
    // Host gradients: a transient device copy of the shard to accumulate into
    // in place, loaded from the host when earlier micro-batches left sums there.
    RETURN_IF_ERROR(CheckHostGrads());
    if (!x.full_grad.data()) {
      const int64_t n = x.layout.shard_numel;
      ASSIGN_OR_RETURN(x.full_grad, DeviceBuffer::Create(backend_, n));
      Track(n * 4);
      if (host_dirty_[u]) {
        // The last micro-batch's copy into the host shard must have landed.
        RETURN_IF_ERROR(
            host_worker_->Wait(host_ticket_[u]).WithContext("adding gradients into the host shards"));
        backend_->CopyToDevice(x.full_grad.data(), host_grads_[u], static_cast<size_t>(n) * sizeof(float));
      } else {
        backend_->Fill(x.full_grad.data(), n, 0.0f);
      }
    }
    return x.full_grad.data();
  }
  if (!x.full_grad.data()) {
    ASSIGN_OR_RETURN(x.full_grad, DeviceBuffer::Create(backend_, x.layout.padded));
    Track(x.layout.padded * 4);
    backend_->Fill(x.full_grad.data(), x.layout.padded, 0.0f);
  }
  return x.full_grad.data();
}

StatusOr<void*> FsdpRuntime::GradBufferStoreOnce(int u, DType* dtype) {
  if (!sharded() || !lowp_grads() || options_.frozen) return UnitAccess::GradBufferStoreOnce(u, dtype);
  Unit& x = units_[u];
  if (x.full_grad.data() || x.grad_lp.data())
    return Internal("GradBufferStoreOnce(" + std::to_string(u) + "): the unit's gradient buffer is already out");
  RETURN_IF_ERROR(CheckHostGrads());
  // The buffer GradsDone would cast the fp32 gradient into: the model stores
  // the same rounded values into it directly.
  ASSIGN_OR_RETURN(x.grad_lp, DeviceBuffer::Create(backend_, TwoByteFloats(x.layout.padded)));
  Track(x.grad_lp.size() * 4);
  backend_->Fill(x.grad_lp.data(), x.grad_lp.size(), 0.0f);  // +0 in bf16/fp16 too
  *dtype = options_.reduce_dtype;
  return static_cast<void*>(x.grad_lp.data());
}

Status FsdpRuntime::GradsDone(int u) {
  Unit& x = units_[u];
  if (!sharded() && options_.grads_on_device) return OkStatus();
  if (!x.full_grad.data() && !(sharded() && x.grad_lp.data()))
    return Internal("GradsDone: unit " + std::to_string(u) + " has no gradient buffer");
  if (!sharded()) {  // host gradients, one rank per shard group: the buffer is the new running sum
    x.grads_done = true;
    const int64_t n = x.layout.shard_numel;
    // Straight into the (pinned) host shard, asynchronously; the worker's task
    // only waits for the copy, so draining it (or waiting host_ticket_[u])
    // means the shard holds the sum. Nothing else touches the shard meanwhile.
    backend_->CopyToHostAsync(host_grads_[u], x.full_grad.data(), static_cast<size_t>(n) * sizeof(float));
    std::shared_ptr<BackendEvent> copied = backend_->RecordEvent();
    host_ticket_[u] = host_worker_->Enqueue([copied] {
      copied->Wait();
      return OkStatus();
    });
    host_dirty_[u] = true;
    Track(-x.full_grad.size() * 4);
    x.full_grad = DeviceBuffer();  // the free is queued after the copy on the same stream
    return OkStatus();
  }
  RETURN_IF_ERROR(CheckHostGrads());
  if (lowp_grads()) {
    const DType dt = options_.reduce_dtype;
    const int64_t n = x.layout.shard_numel;
    if (!x.grad_lp.data()) {  // else the model stored into it (GradBufferStoreOnce)
      ASSIGN_OR_RETURN(x.grad_lp, DeviceBuffer::Create(backend_, TwoByteFloats(x.layout.padded)));
      Track(x.grad_lp.size() * 4);
      backend_->CastFromF32(x.full_grad.data(), x.grad_lp.data(), x.layout.padded, dt);
      Track(-x.full_grad.size() * 4);
      x.full_grad = DeviceBuffer();  // only the two-byte copy waits for the wire
    }
    char* own = reinterpret_cast<char*>(x.grad_lp.data()) + static_cast<int64_t>(shard_rank_) * n * DTypeSize(dt);
    x.grads_done = true;
    std::shared_ptr<BackendEvent> ready = backend_->RecordEvent();  // after the cast
    x.rs_ticket = comm_->Enqueue([this, u, own, n, dt, ready] {
      return shard_comm_->ReduceScatter(units_[u].grad_lp.data(), own, n, dt, ReduceOp::kSum, CallOptions(*ready, u))
          .WithContext(std::string(DTypeName(dt)) + " reduce-scatter of unit " + std::to_string(u));
    });
  } else {
    if (!x.rs_out.data()) {
      ASSIGN_OR_RETURN(x.rs_out, DeviceBuffer::Create(backend_, x.layout.shard_numel));
      Track(x.layout.shard_numel * 4);
    }
    x.grads_done = true;
    std::shared_ptr<BackendEvent> ready = backend_->RecordEvent();  // after the model's last accumulation
    x.rs_ticket = comm_->Enqueue([this, u, ready] {
      Unit& y = units_[u];
      return shard_comm_
          ->ReduceScatter(y.full_grad.data(), y.rs_out.data(), y.layout.shard_numel, ReduceOp::kSum, CallOptions(*ready, u))
          .WithContext("reduce-scatter of unit " + std::to_string(u));
    });
  }
  if (x.keep_until_grads && x.holds == 0) FreeFull(u);
  // Fold in (and free) every reduce-scatter that has finished, so at most the
  // in-flight units hold full-size gradient buffers.
  for (int v = 0; v < num_units(); ++v) {
    Unit& y = units_[v];
    if (v != u && y.rs_ticket && comm_->Done(y.rs_ticket)) {
      RETURN_IF_ERROR(comm_->Wait(y.rs_ticket));
      RETURN_IF_ERROR(FoldReduced(v));
    }
  }
  return OkStatus();
}

Status FsdpRuntime::FoldReduced(int u) {
  Unit& y = units_[u];
  const int64_t n = y.layout.shard_numel;
  if (y.grad_lp.data()) {
    const DType dt = options_.reduce_dtype;
    const char* own = reinterpret_cast<const char*>(y.grad_lp.data()) + static_cast<int64_t>(shard_rank_) * n * DTypeSize(dt);
    ASSIGN_OR_RETURN(DeviceBuffer wide, DeviceBuffer::Create(backend_, n));
    Track(n * 4);
    backend_->CastToF32(own, wide.data(), n, dt);
    if (options_.grads_on_device) {
      backend_->Add(y.grads.data(), wide.data(), y.grads.data(), n);
    } else {
      RETURN_IF_ERROR(AddToHostGrads(u, wide.data(), n));
    }
    Track(-(n + y.grad_lp.size()) * 4);
    y.grad_lp = DeviceBuffer();
  } else {
    if (options_.grads_on_device) {
      backend_->Add(y.grads.data(), y.rs_out.data(), y.grads.data(), n);
    } else {
      RETURN_IF_ERROR(AddToHostGrads(u, y.rs_out.data(), n));
    }
    Track(-(y.full_grad.size() + y.rs_out.size()) * 4);
    y.full_grad = DeviceBuffer();
    y.rs_out = DeviceBuffer();
  }
  y.rs_ticket = 0;
  return OkStatus();
}

void FsdpRuntime::ZeroGrads() {
  if (options_.frozen) return;
  if (options_.grads_on_device) {
    for (auto& x : units_) backend_->Fill(x.grads.data(), x.layout.shard_numel, 0.0f);
    return;
  }
  if (host_ == nullptr) return;  // FinishMicroBatch/GradBuffer report the missing attach
  // The worker may still be adding last step's gradients (or using host_).
  // An error stays with the worker and surfaces at the next wait on it.
  (void)DrainHostGrads();
  for (int u = 0; u < num_units(); ++u) {
    host_->Fill(host_grads_[u], units_[u].layout.shard_numel, 0.0f);
    host_dirty_[u] = false;
  }
}

void FsdpRuntime::BeginMicroBatch() {
  for (auto& x : units_) x.grads_done = false, x.releases = 0;
  if (recording_ && !order_.empty()) recording_ = false;
  cursor_ = 0;
  in_order_ = true;
}

// The host worker is not drained here: the folds below only queue more work
// for it, and the next micro-batch may overlap those adds.
Status FsdpRuntime::FinishMicroBatch() {
  RETURN_IF_ERROR(CheckHostGrads());
  RETURN_IF_ERROR(WaitTicket(comm_->Enqueue([] { return OkStatus(); })));
  for (int u = 0; u < num_units(); ++u) {
    Unit& x = units_[u];
    if (x.rs_ticket) RETURN_IF_ERROR(FoldReduced(u));
    if (!sharded() && x.full_grad.data()) RETURN_IF_ERROR(GradsDone(u));  // host gradients the model never closed
    if (x.holds == 0 && x.gathered) FreeFull(u);  // shard_grad_op leftovers, unused prefetches
  }
  return OkStatus();
}

Status FsdpRuntime::FinishGradients() {
  RETURN_IF_ERROR(comm_->Drain());
  if (options_.frozen) return OkStatus();
  RETURN_IF_ERROR(CheckHostGrads());
  // Host shards: every copy down has landed and been added before the
  // all-reduce reads them (nccl's staging copy is not ordered after compute).
  RETURN_IF_ERROR(DrainHostGrads());
  if (!replicate_comm_ || replicate_comm_->world_size() == 1) return OkStatus();
  // One call for all units (one NCCL group on device shards; buffer i is unit i).
  std::vector<Communicator::Buffer> shards;
  for (int u = 0; u < num_units(); ++u) {
    Unit& x = units_[u];
    shards.push_back({options_.grads_on_device ? x.grads.data() : host_grads_[u], x.layout.shard_numel});
  }
  return replicate_comm_->AllReduceMany(shards, ReduceOp::kSum, options_.comm)
      .WithContext("gradient all-reduce of " + std::to_string(num_units()) + " units");
}

StatusOr<double> FsdpRuntime::GradNormSquared() {
  RETURN_IF_ERROR(comm_->Drain());
  if (options_.frozen) return 0.0;
  double sq = 0;
  RETURN_IF_ERROR(CheckHostGrads());
  RETURN_IF_ERROR(DrainHostGrads());  // host_ is the compute thread's from here
  for (int u = 0; u < num_units(); ++u) {
    const Unit& x = units_[u];
    sq += options_.grads_on_device ? backend_->SumSquares(x.grads.data(), x.layout.shard_numel)
                                   : host_->SumSquares(host_grads_[u], x.layout.shard_numel);
  }
  if (sharded()) RETURN_IF_ERROR(shard_comm_->AllReduce(&sq, 1, ReduceOp::kSum, options_.comm));
  return sq;
}

Status FsdpRuntime::AllReduceSum(double* data, int64_t count) {
  RETURN_IF_ERROR(comm_->Drain());
  if (sharded()) RETURN_IF_ERROR(shard_comm_->AllReduce(data, count, ReduceOp::kSum, options_.comm));
  if (replicate_comm_ && replicate_comm_->world_size() > 1)
    RETURN_IF_ERROR(replicate_comm_->AllReduce(data, count, ReduceOp::kSum, options_.comm));
  return OkStatus();
}

Status FsdpRuntime::AllReduceSumFloats(float* data, int64_t count) {
  RETURN_IF_ERROR(comm_->Drain());
  if (sharded()) RETURN_IF_ERROR(shard_comm_->AllReduce(data, count, ReduceOp::kSum, options_.comm));
  if (replicate_comm_ && replicate_comm_->world_size() > 1)
    RETURN_IF_ERROR(replicate_comm_->AllReduce(data, count, ReduceOp::kSum, options_.comm));
  return OkStatus();
}

Status FsdpRuntime::GatherUnit(int u, std::vector<float>* out, const float* host_master) {
  RETURN_IF_ERROR(comm_->Drain());
  Unit& x = units_[u];
  if (options_.frozen && (quantized(u) || (lowp_shard() && host_master == nullptr)))
    return frozen_->Gather(u, x.layout, x.params.data(), out, UnitOptions(u));
  if (lowp_shard() && host_master == nullptr)
    return Internal("GatherUnit(" + std::to_string(u) + "): the device parameter shard is " +
                    DTypeName(options_.param_shard_dtype) + " (rounded weights); pass the fp32 master");
  if (out) out->resize(x.layout.numel);
  const size_t shard_bytes = static_cast<size_t>(x.layout.shard_numel) * sizeof(float);
  if (!sharded()) {
    if (!out) return OkStatus();
    if (host_master) {
      std::copy(host_master, host_master + x.layout.numel, out->begin());
    } else {
      backend_->CopyToHost(out->data(), x.params.data(), x.layout.numel * sizeof(float));
    }
    return OkStatus();
  }
  DeviceBuffer staged;  // the host master, on the device for the all-gather
  const float* send = x.params.data();
  if (host_master) {
    ASSIGN_OR_RETURN(staged, DeviceBuffer::Create(backend_, x.layout.shard_numel));
    backend_->CopyToDevice(staged.data(), host_master, shard_bytes);
    send = staged.data();
  }
  ASSIGN_OR_RETURN(DeviceBuffer full, DeviceBuffer::Create(backend_, x.layout.padded));
  RETURN_IF_ERROR(shard_comm_->AllGather(send, full.data(), x.layout.shard_numel, UnitOptions(u))
                      .WithContext("export all-gather of unit " + std::to_string(u)));
  if (out) backend_->CopyToHost(out->data(), full.data(), x.layout.numel * sizeof(float));
  return OkStatus();
}

}  // namespace shard
