// FsdpRuntime's host gradient shards (optimizer offload, grads_on_device
// false): the staging ring, the host worker that adds each reduce-scatter
// result into the host shard, and draining it. See fsdp_runtime.h.
#include <algorithm>

#include "shard/fsdp/fsdp_runtime.h"

namespace shard {

Status FsdpRuntime::AttachHostGrads(Backend* host, std::vector<float*> grads) {
  if (options_.grads_on_device) return Internal("AttachHostGrads: the runtime keeps its gradient shards on the device");
  if (host == nullptr || grads.size() != units_.size())
    return Internal("AttachHostGrads: need a host backend and " + std::to_string(units_.size()) +
                    " gradient shards, got " + std::to_string(grads.size()));
  if (host_worker_) return Internal("AttachHostGrads: host gradient shards are attached already");
  int64_t largest = 0;
  for (const Unit& x : units_) largest = std::max(largest, x.layout.shard_numel);
  // Two stages: one being filled by the device while the worker adds the
  // other; the planner counts the same (memory_model.cc, "pinned transfer staging").
  host_stages_.clear();
  for (int s = 0; s < kHostStages; ++s) {
    auto b = HostBuffer::Create(backend_, largest);
    if (!b.ok()) return b.status().WithContext("FSDP runtime: host gradient staging buffer " + std::to_string(s));
    host_stages_.push_back(std::move(*b));
  }
  host_ = host;
  host_grads_ = std::move(grads);
  host_dirty_.assign(units_.size(), false);
  stage_ticket_.assign(kHostStages, 0);
  host_ticket_.assign(units_.size(), 0);
  next_stage_ = 0;
  host_worker_ = std::make_unique<CommThread>(CommThread::Waits::kLocalWork);
  return OkStatus();
}

int64_t FsdpRuntime::host_stage_bytes() const {
  int64_t bytes = 0;
  for (const HostBuffer& b : host_stages_) bytes += b.size() * static_cast<int64_t>(sizeof(float));
  return bytes;
}

Status FsdpRuntime::DrainHostGrads() {
  if (!host_worker_) return OkStatus();
  return host_worker_->Drain().WithContext("adding gradients into the host shards");
}

Status FsdpRuntime::CheckHostGrads() const {
  if (!options_.grads_on_device && host_ == nullptr)
    return Internal("FSDP runtime: gradients are kept in host memory (parallel.offload_optimizer) but no host "
                    "gradient shards were attached");
  return OkStatus();
}

Status FsdpRuntime::AddToHostGrads(int u, const float* src, int64_t n) {
  const int s = next_stage_;
  next_stage_ = (next_stage_ + 1) % kHostStages;
  // The stage's previous add must have read it before the device overwrites it.
  if (!host_worker_->Done(stage_ticket_[s])) ++host_stage_stalls_;
  RETURN_IF_ERROR(host_worker_->Wait(stage_ticket_[s]).WithContext("adding gradients into the host shards"));
  float* stage = host_stages_[s].data();
  float* dst = host_grads_[u];
  Backend* host = host_;
  // Queued after the work producing `src`; the caller's free of `src` is
  // queued after the copy (same stream), so it stays valid until copied.
  backend_->CopyToHostAsync(stage, src, static_cast<size_t>(n) * sizeof(float));
  std::shared_ptr<BackendEvent> copied = backend_->RecordEvent();
  // Tasks for one unit run in FIFO order, so its micro-batches add up in the
  // same order as on the device (bitwise the same sums).
  const CommThread::Ticket t = host_worker_->Enqueue([copied, host, dst, stage, n] {
    copied->Wait();
    host->Add(dst, stage, dst, n);
    return OkStatus();
  });
  stage_ticket_[s] = t;
  host_ticket_[u] = t;
  host_dirty_[u] = true;
  return OkStatus();
}

}  // namespace shard
