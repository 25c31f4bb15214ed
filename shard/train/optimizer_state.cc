#include "shard/train/optimizer_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <system_error>

#include "shard/optim/adamw.h"

namespace shard {

StatusOr<std::unique_ptr<OptimizerState>> OptimizerState::Create(Backend* device, FsdpRuntime* runtime,
                                                                 bool offload) {
  std::unique_ptr<OptimizerState> s(new OptimizerState(device, runtime, offload));
  const int units = runtime->num_units();
  bool moments_missing = false;
  for (int u = 0; u < units; ++u)
    moments_missing |= runtime->layout(u).shard_numel > 0 && runtime->adam_m(u) == nullptr && !runtime->frozen();
  if (offload ? runtime->moment_device_bytes() > 0 : moments_missing)
    return Internal(std::string("optimizer state: parallel.offload_optimizer is ") + (offload ? "true" : "false") +
                    " but the FSDP runtime was created with moments_on_device = " + (offload ? "true" : "false"));
  if (!offload && runtime->param_shard_dtype() != DType::kF32)
    return Internal("optimizer state: a two-byte device parameter shard needs parallel.offload_optimizer (the "
                    "fp32 master must live somewhere)");
  if (runtime->grads_on_host() != offload)
    return Internal(std::string("optimizer state: parallel.offload_optimizer is ") + (offload ? "true" : "false") +
                    " but the FSDP runtime was created with grads_on_device = " + (offload ? "true" : "false"));
  if (!offload) return s;
  // The simulator's backend holds no data: its host memory is not to be
  // touched, and the host arithmetic is simulated too.
  const bool data = device->holds_data();
  auto zero = [data](HostBuffer& b, int64_t n) {
    if (data) std::fill_n(b.data(), n, 0.0f);
  };
  ASSIGN_OR_RETURN(s->host_, CreateBackend(data ? "cpu" : "sim"));
  s->shards_.resize(units);
  int64_t largest = 0;
  for (int u = 0; u < units; ++u) {
    const int64_t n = runtime->layout(u).shard_numel;
    largest = std::max(largest, n);
    HostShard& h = s->shards_[u];
    for (HostBuffer* b : {&h.master, &h.m, &h.v}) {
      auto buf = HostBuffer::Create(device, n);
      if (!buf.ok())
        return buf.status().WithContext("parallel.offload_optimizer: host memory for unit " + std::to_string(u));
      *b = std::move(*buf);
      s->host_bytes_ += n * static_cast<int64_t>(sizeof(float));
    }
    zero(h.m, n);
    zero(h.v, n);
    if (runtime->param_shard_dtype() == DType::kF32) {
      device->CopyToHost(h.master.data(), runtime->param_shard(u), n * sizeof(float));
    } else {
      zero(h.master, n);  // a rounded shard is no master: WriteParams sets it
    }
  }
  // The host gradient shards the runtime accumulates into (it allocates its
  // own staging ring for reduce-scatter results on their way down).
  std::vector<float*> grads;
  for (int u = 0; u < units; ++u) {
    const int64_t n = runtime->layout(u).shard_numel;
    auto buf = HostBuffer::Create(device, n);
    if (!buf.ok())
      return buf.status().WithContext("parallel.offload_optimizer: host gradient shard of unit " + std::to_string(u));
    s->shards_[u].grad = std::move(*buf);
    zero(s->shards_[u].grad, n);
    s->host_bytes_ += n * static_cast<int64_t>(sizeof(float));
    grads.push_back(s->shards_[u].grad.data());
  }
  if (runtime->param_shard_dtype() != DType::kF32) {
    // The master cast down for the upload: one buffer being filled by the
    // helper thread, one being copied up by the training thread.
    for (HostBuffer& b : s->lowp_stage_) {
      auto lp = HostBuffer::Create(device, (largest + 1) / 2);
      if (!lp.ok()) return lp.status().WithContext("parallel.offload_optimizer: two-byte parameter staging buffer");
      b = std::move(*lp);
      s->host_bytes_ += b.size() * static_cast<int64_t>(sizeof(float));
    }
  }
  RETURN_IF_ERROR(runtime->AttachHostGrads(s->host_.get(), std::move(grads)));
  s->host_bytes_ += runtime->host_stage_bytes();
  return s;
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
    auto adamw = [&](int u) {
      HostShard& h = shards_[u];
      AdamWSlice(host_.get(), ranges(u), config, lr, step, clip, h.master.data(), h.grad.data(), h.m.data(),
                 h.v.data());
      if (shard_dt != DType::kF32)
        host_->CastFromF32(h.master.data(), lowp_stage_[u % 2].data(), runtime_->layout(u).shard_numel, shard_dt);
    };
    // Unit u's new weights to its device shard: the master, or its two-byte
    // cast that the helper thread left in lowp_stage_[u % 2].
    auto upload = [&](int u) {
      if (shard_dt == DType::kF32) {
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
  const HostShard& h = shards_[u];
  std::memcpy(params, h.master.data(), bytes);
  std::memcpy(m, h.m.data(), bytes);
  std::memcpy(v, h.v.data(), bytes);
}

void OptimizerState::WriteParams(int u, const float* params) {
  const int64_t n = runtime_->layout(u).shard_numel;
  if (n <= 0) return;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (offload_) std::memcpy(shards_[u].master.data(), params, bytes);
  const DType dt = runtime_->param_shard_dtype();
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
  HostShard& h = shards_[u];
  std::memcpy(h.m.data(), m, bytes);
  std::memcpy(h.v.data(), v, bytes);
}

}  // namespace shard
