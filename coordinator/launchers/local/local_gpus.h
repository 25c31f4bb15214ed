// Which of a local job's GPUs are still on this host, for elastic restarts
// (restart.min_world_size; docs/control-plane.md "Elastic restarts"). A GPU
// that falls off the bus (Xid 79), a driver reset or an operator taking it
// leaves the job's placement naming a device the runtime no longer has; a
// fresh probe says which are left. Devices are told apart by PCI bus id, not
// by CUDA ordinal: the ordinals after a loss are renumbered.
//
// Thread-safety: none; the local launcher calls it from the JobManager's
// control loop only, never under the job lock.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardd {

using shard::Status;
using shard::StatusOr;

// The GPUs the CUDA runtime sees now, in ordinal order, each by its PCI bus
// id (`shardd-worker --probe --json`). The coordinator runs its worker
// binary; unit tests pass a fake.
using GpuIdProbe = std::function<StatusOr<std::vector<std::string>>()>;

// The CUDA ordinals now of those of `job_gpus` (ordinals at the coordinator's
// start, as the allocator hands them out) whose id in `baseline` is still in
// `now`, in job order. Pure.
std::vector<int> SurvivingOrdinals(const std::vector<int>& job_gpus, const std::vector<std::string>& baseline,
                                   const std::vector<std::string>& now);

class LocalGpuWatch {
 public:
  // baseline: the probe at the coordinator's start (ordinal i is baseline[i]);
  // probe: asked again at most once per min_interval_ms (a CUDA start is not free).
  LocalGpuWatch(StatusOr<std::vector<std::string>> baseline, GpuIdProbe probe, std::function<int64_t()> now_ms,
                int64_t min_interval_ms = 10000);
  // The CUDA ordinals now of the job's devices that are still here, or why
  // that cannot be said (the probe failed, no PCI ids at start).
  StatusOr<std::vector<int>> Surviving(const std::vector<int>& job_gpus);

 private:
  StatusOr<std::vector<std::string>> baseline_;
  GpuIdProbe probe_;
  std::function<int64_t()> now_ms_;
  int64_t min_interval_ms_;
  int64_t probed_ms_ = 0;
  bool probed_ = false;
  StatusOr<std::vector<std::string>> last_ = shard::Unavailable("not probed");
};

// "0,1,3" as CUDA_VISIBLE_DEVICES lists them, and back (InvalidArgument on
// anything but comma-separated ordinals; "" is no GPU).
std::string DeviceList(const std::vector<int>& gpus);
StatusOr<std::vector<int>> ParseDeviceList(const std::string& text);

}  // namespace shardd
