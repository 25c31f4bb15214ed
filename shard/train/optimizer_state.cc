#include "shard/train/optimizer_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <system_error>

#include "shard/optim/adamw.h"
#include "shard/optim/bf16_state.h"

namespace shard {

StatusOr<std::unique_ptr<OptimizerState>> OptimizerState::Create(Backend* device, FsdpRuntime* runtime,
                                                                 bool offload, const OptimStateOptions& options) {
  std::unique_ptr<OptimizerState> s(new OptimizerState(device, runtime, offload, options));
  RETURN_IF_ERROR(CheckRuntime(*runtime, offload, options));
  if (!offload) return s;
  // The simulator's backend holds no data: its host memory is not to be
  // touched, and the host arithmetic is simulated too.
  const bool data = device->holds_data();
  ASSIGN_OR_RETURN(s->host_, CreateBackend(data ? "cpu" : "sim"));
  int64_t largest = 0;
  RETURN_IF_ERROR(s->AllocateHostShards(data, &largest));
  RETURN_IF_ERROR(s->AllocateStages(largest));
  // The host gradient shards the runtime accumulates into (it allocates its
  // own staging ring for reduce-scatter results on their way down).
  std::vector<float*> grads;
  for (HostShard& h : s->shards_) grads.push_back(h.grad.data());
  RETURN_IF_ERROR(runtime->AttachHostGrads(s->host_.get(), std::move(grads)));
  s->host_bytes_ += runtime->host_stage_bytes();
  if (s->bf16() && runtime->param_shard_dtype() == DType::kF32 && data) {
    // The device shard's current weights become the bf16 master (rounded to
    // nearest), and the device shard its widened copy, so the two agree.
    std::vector<float> w;
    for (int u = 0; u < runtime->num_units(); ++u) {
      w.resize(runtime->layout(u).shard_numel);
      device->CopyToHost(w.data(), runtime->param_shard(u), w.size() * sizeof(float));
      s->WriteParams(u, w.data());
    }
  }
  return s;
}

Status OptimizerState::CheckRuntime(FsdpRuntime& runtime, bool offload, const OptimStateOptions& options) {
  if (options.state_dtype != DType::kF32 && options.state_dtype != DType::kBF16)
    return InvalidArgument(std::string("optim.state_dtype: ") + DTypeName(options.state_dtype) +
                           " is not one of: fp32, bf16");
  if (options.state_dtype == DType::kBF16 && (!offload || runtime.frozen()))
    return InvalidArgument("optim.state_dtype: bf16 needs parallel.offload_optimizer: true and full fine-tuning "
                           "(bf16 state is held in host memory; on the device it is not built)");
  bool moments_missing = false;
  for (int u = 0; u < runtime.num_units(); ++u)
    moments_missing |= runtime.layout(u).shard_numel > 0 && runtime.adam_m(u) == nullptr && !runtime.frozen();
  if (offload ? runtime.moment_device_bytes() > 0 : moments_missing)
    return Internal(std::string("optimizer state: parallel.offload_optimizer is ") + (offload ? "true" : "false") +
                    " but the FSDP runtime was created with moments_on_device = " + (offload ? "true" : "false"));
  if (!offload && runtime.param_shard_dtype() != DType::kF32 && !runtime.frozen())
    return Internal("optimizer state: a two-byte device parameter shard needs parallel.offload_optimizer (the "
                    "fp32 master must live somewhere)");
  if (runtime.grads_on_host() != offload)
    return Internal(std::string("optimizer state: parallel.offload_optimizer is ") + (offload ? "true" : "false") +
                    " but the FSDP runtime was created with grads_on_device = " + (offload ? "true" : "false"));
  return OkStatus();
}

Status OptimizerState::AllocateHostShards(bool data, int64_t* largest) {
  auto zero = [data](HostBuffer& b, int64_t n) {
    if (data) std::fill_n(b.data(), n, 0.0f);
  };
  const int units = runtime_->num_units();
  shards_.resize(units);
  for (int u = 0; u < units; ++u) {
    const int64_t n = runtime_->layout(u).shard_numel;
    *largest = std::max(*largest, n);
    HostShard& h = shards_[u];
    // bf16 state: n bf16 elements in (n + 1) / 2 floats' room.
    const int64_t floats = bf16() ? (n + 1) / 2 : n;
    for (HostBuffer* b : {&h.master, &h.m, &h.v}) {
      auto buf = HostBuffer::Create(device_, floats);
      if (!buf.ok())
        return buf.status().WithContext("parallel.offload_optimizer: host memory for unit " + std::to_string(u));
      *b = std::move(*buf);
      host_bytes_ += floats * static_cast<int64_t>(sizeof(float));
    }
    zero(h.m, floats);
    zero(h.v, floats);
    if (runtime_->param_shard_dtype() == DType::kF32 && !bf16()) {
      device_->CopyToHost(h.master.data(), runtime_->param_shard(u), n * sizeof(float));
    } else {
      zero(h.master, floats);  // a rounded shard is no master (nor an fp32 one a bf16 master): WriteParams sets it
    }
  }
  for (int u = 0; u < units; ++u) {
    const int64_t n = runtime_->layout(u).shard_numel;
    auto buf = HostBuffer::Create(device_, n);
    if (!buf.ok())
      return buf.status().WithContext("parallel.offload_optimizer: host gradient shard of unit " + std::to_string(u));
    shards_[u].grad = std::move(*buf);
    zero(shards_[u].grad, n);
    host_bytes_ += n * static_cast<int64_t>(sizeof(float));
  }
  return OkStatus();
}

Status OptimizerState::AllocateStages(int64_t largest) {
  // bf16 state uploads its master as is under bf16 precision; fp32 and fp16
  // shards are made from it widened: one buffer per pipeline slot.
  const DType shard_dt = runtime_->param_shard_dtype();
  if (bf16() && shard_dt != DType::kBF16) {
    for (HostBuffer& b : wide_stage_) {
      auto w = HostBuffer::Create(device_, largest);
      if (!w.ok()) return w.status().WithContext("optim.state_dtype bf16: fp32 parameter staging buffer");
      b = std::move(*w);
      host_bytes_ += b.size() * static_cast<int64_t>(sizeof(float));
    }
  }
  if (shard_dt != DType::kF32 && !(bf16() && shard_dt == DType::kBF16)) {
    // The master cast down for the upload: one buffer being filled by the
    // helper thread, one being copied up by the training thread.
    for (HostBuffer& b : lowp_stage_) {
      auto lp = HostBuffer::Create(device_, (largest + 1) / 2);
      if (!lp.ok()) return lp.status().WithContext("parallel.offload_optimizer: two-byte parameter staging buffer");
      b = std::move(*lp);
      host_bytes_ += b.size() * static_cast<int64_t>(sizeof(float));
    }
  }
  return OkStatus();
}

uint16_t* OptimizerState::held16(int u, int which) const {
  const HostShard& h = shards_[u];
  const HostBuffer& b = which == 0 ? h.master : which == 1 ? h.m : h.v;
  return reinterpret_cast<uint16_t*>(b.data());
}

const void* OptimizerState::held(int u, int which) const {
  if (!offload_) return nullptr;
  if (bf16()) return held16(u, which);
  const HostShard& h = shards_[u];
  return which == 0 ? h.master.data() : which == 1 ? h.m.data() : h.v.data();
}

const float* OptimizerState::master(int u) const {
  if (!offload_) return nullptr;
  if (!bf16()) return shards_[u].master.data();
  const int64_t n = runtime_->layout(u).shard_numel;
  master_f32_.resize(n);
  if (device_->holds_data()) ConvertToF32(DType::kBF16, held16(u, 0), master_f32_.data(), n);
  return master_f32_.data();
}

const void* OptimizerState::Bf16Upload(int u, int slot) {
  const DType dt = runtime_->param_shard_dtype();
  if (dt == DType::kBF16) return held16(u, 0);
  const int64_t n = runtime_->layout(u).shard_numel;
  float* wide = wide_stage_[slot].data();
  if (!device_->holds_data()) return dt == DType::kF32 ? wide : lowp_stage_[slot].data();
  ConvertToF32(DType::kBF16, held16(u, 0), wide, n);
  if (dt == DType::kF32) return wide;
  ConvertFromF32(dt, wide, lowp_stage_[slot].data(), n);
  return lowp_stage_[slot].data();
}

OptimizerState::~OptimizerState() {
  if (offload_) (void)runtime_->DrainHostGrads();
}

Status OptimizerState::Step(const ParamLayout& layout, const OptimConfig& config, float lr, int64_t step,
                            float clip) {
  if (runtime_->frozen())
    return FailedPrecondition("optimizer step: the base is frozen (LoRA); only the adapters are stepped");
  const auto t0 = std::chrono::steady_clock::now();
  const int sr = runtime_->shard_rank();
  const int units = runtime_->num_units();
  if (layout.num_units() != units)
    return Internal("optimizer step: the layout has " + std::to_string(layout.num_units()) +
                    " units, the FSDP runtime " + std::to_string(units));
  auto ranges = [&](int u) {
    const ShardLayout& sl = runtime_->layout(u);
    return DecayRanges(layout.units[u], sl.begin(sr), sl.end(sr), config.decay_norms_and_embeddings);
  };
  auto bytes = [&](int u) { return static_cast<size_t>(runtime_->layout(u).shard_numel) * sizeof(float); };
  const DType shard_dt = runtime_->param_shard_dtype();
  if (!offload_) {
    for (int u = 0; u < units; ++u)
      AdamWSlice(device_, ranges(u), config, lr, step, clip, runtime_->param_shard(u), runtime_->grad_shard(u),
                 runtime_->adam_m(u), runtime_->adam_v(u));
  } else if (units > 0) {
    // The runtime's host worker may still be adding gradients (FinishGradients
    // drains it; this covers callers that skip it) and uses host_ meanwhile.
    RETURN_IF_ERROR(runtime_->DrainHostGrads());
    // A per-unit pipeline: while a helper thread runs unit u's host AdamW (on
    // the host backend, which only that thread uses meanwhile) on the host
    // gradient shard (final: FinishGradients drained the reductions), the
    // training thread copies unit u-1's updated master up into its device
    // shard; the device copies return with the copy done, after queued work.
    const void* bf16_src[2] = {nullptr, nullptr};  // bf16 state: what upload(u) sends, per slot
    const bool data = device_->holds_data();
    auto adamw = [&](int u) {
      HostShard& h = shards_[u];
      if (bf16()) {
        // The simulator's host memory holds nothing to update.
        const SrSlice where{options_.seed, u, runtime_->layout(u).begin(sr)};
        if (data) AdamWSliceBf16(ranges(u), config, lr, step, clip, where, held16(u, 0), h.grad.data(), held16(u, 1),
                                 held16(u, 2));
        bf16_src[u % 2] = Bf16Upload(u, u % 2);
        return;
      }
      AdamWSlice(host_.get(), ranges(u), config, lr, step, clip, h.master.data(), h.grad.data(), h.m.data(),
                 h.v.data());
      if (shard_dt != DType::kF32)
        host_->CastFromF32(h.master.data(), lowp_stage_[u % 2].data(), runtime_->layout(u).shard_numel, shard_dt);
    };
    // Unit u's new weights to its device shard: the master, or its two-byte
    // cast that the helper thread left in lowp_stage_[u % 2].
    auto upload = [&](int u) {
      if (bf16()) {
        device_->CopyToDevice(runtime_->param_shard(u), bf16_src[u % 2],
                              static_cast<size_t>(runtime_->layout(u).shard_numel) * DTypeSize(shard_dt));
      } else if (shard_dt == DType::kF32) {
        device_->CopyToDevice(runtime_->param_shard(u), shards_[u].master.data(), bytes(u));
      } else {
        device_->CopyToDevice(runtime_->param_shard(u), lowp_stage_[u % 2].data(),
                              static_cast<size_t>(runtime_->layout(u).shard_numel) * DTypeSize(shard_dt));
      }
    };
    for (int u = 0; u < units; ++u) {
      std::future<void> running;
      try {
        running = std::async(std::launch::async, adamw, u);
      } catch (const std::system_error&) {
        adamw(u);  // no thread to be had: the same arithmetic, just not overlapped
      }
      if (u > 0) upload(u - 1);
      if (running.valid()) running.get();
    }
    upload(units - 1);
  }
  device_->Synchronize();
  last_step_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return OkStatus();
}

void OptimizerState::ReadShard(int u, int64_t n, float* params, float* m, float* v) {
  if (n <= 0) return;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!offload_) {
    device_->CopyToHost(params, runtime_->param_shard(u), bytes);
    device_->CopyToHost(m, runtime_->adam_m(u), bytes);
    device_->CopyToHost(v, runtime_->adam_v(u), bytes);
    return;
  }
  if (bf16()) {
    ConvertToF32(DType::kBF16, held16(u, 0), params, n);
    ConvertToF32(DType::kBF16, held16(u, 1), m, n);
    ConvertToF32(DType::kBF16, held16(u, 2), v, n);
    return;
  }
  const HostShard& h = shards_[u];
  std::memcpy(params, h.master.data(), bytes);
  std::memcpy(m, h.m.data(), bytes);
  std::memcpy(v, h.v.data(), bytes);
}

void OptimizerState::ReadShardHeld(int u, int64_t n, void* params, void* m, void* v) {
  if (!bf16()) return ReadShard(u, n, static_cast<float*>(params), static_cast<float*>(m), static_cast<float*>(v));
  if (n <= 0) return;
  const size_t bytes = static_cast<size_t>(n) * 2;
  std::memcpy(params, held16(u, 0), bytes);
  std::memcpy(m, held16(u, 1), bytes);
  std::memcpy(v, held16(u, 2), bytes);
}

void OptimizerState::WriteParams(int u, const float* params) {
  const int64_t n = runtime_->layout(u).shard_numel;
  if (n <= 0) return;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const DType dt = runtime_->param_shard_dtype();
  if (bf16()) {
    if (!device_->holds_data()) return;  // the simulator: nothing to write
    // Rounded to nearest into the master; the device shard is made from it.
    ConvertFromF32(DType::kBF16, params, held16(u, 0), n);
    device_->CopyToDevice(runtime_->param_shard(u), Bf16Upload(u, 0), static_cast<size_t>(n) * DTypeSize(dt));
    return;
  }
  if (offload_) std::memcpy(shards_[u].master.data(), params, bytes);
  if (dt == DType::kF32) {
    device_->CopyToDevice(runtime_->param_shard(u), params, bytes);
    return;
  }
  // A two-byte device shard exists only offloaded: cast the master on the host,
  // with host_ taken back from the runtime's host worker first (an error
  // stays with the worker and surfaces at the step).
  (void)runtime_->DrainHostGrads();
  host_->CastFromF32(shards_[u].master.data(), lowp_stage_[0].data(), n, dt);
  device_->CopyToDevice(runtime_->param_shard(u), lowp_stage_[0].data(), static_cast<size_t>(n) * DTypeSize(dt));
}

void OptimizerState::WriteShard(int u, const float* params, const float* m, const float* v) {
  const int64_t n = runtime_->layout(u).shard_numel;
  if (n <= 0) return;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  WriteParams(u, params);
  if (!offload_) {
    device_->CopyToDevice(runtime_->adam_m(u), m, bytes);
    device_->CopyToDevice(runtime_->adam_v(u), v, bytes);
    return;
  }
  if (bf16()) {
    if (!device_->holds_data()) return;
    ConvertFromF32(DType::kBF16, m, held16(u, 1), n);
    ConvertFromF32(DType::kBF16, v, held16(u, 2), n);
    return;
  }
  HostShard& h = shards_[u];
  std::memcpy(h.m.data(), m, bytes);
  std::memcpy(h.v.data(), v, bytes);
}

}  // namespace shard
