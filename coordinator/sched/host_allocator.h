// What the local launcher may use on this host (GPUs, CPU slots, host
// memory), what one job asks for, and which specific devices and slots each
// running job holds. Pure bookkeeping: no processes, no gRPC, no clock — the
// JobManager decides when to hold and release, the queue (job_queue.h) decides
// who goes next.
//
// Thread-safety: none; the JobManager uses one under its mu_.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardd::sched {

using shard::Status;
using shard::StatusOr;

struct HostCapacity {
  std::vector<int> gpus;   // device indices the local launcher may hand out
  int cpu_slots = 1;       // one slot = one compute thread of a CPU rank
  int64_t host_bytes = 0;  // host memory for jobs; 0 = not counted
  std::string Describe() const;  // "8 GPUs (0-7), 16 CPU slots, 62.8 GiB host memory"
};

// A job's demand on the host. GPU ranks take one device each; CPU ranks one
// slot each (their thread count).
struct Demand {
  int gpus = 0;
  int pinned_gpu = -1;  // resources.device cuda:N: that device and no other
  int cpu_slots = 0;
  int64_t host_bytes = 0;  // the planner's host bytes for the whole job (0 = unknown)
  std::string Describe() const;  // "4 GPUs, 2 CPU slots, 1.5 GiB host memory"
  std::string Encode() const;    // the state store's form
  static StatusOr<Demand> Decode(const std::string& text);
};

// The specific resources one attempt (and its restarts) runs on.
struct Placement {
  std::vector<int> gpus;       // rank r runs on gpus[r] (a pinned job: gpus[0] for all)
  std::vector<int> cpu_slots;  // disjoint from every other running job's
  int64_t host_bytes = 0;
  bool empty() const { return gpus.empty() && cpu_slots.empty() && host_bytes == 0; }
  std::string Describe() const;  // "GPUs 0-3, CPU slots 4-5, 1.5 GiB"
  std::string Encode() const;
  static StatusOr<Placement> Decode(const std::string& text);
};

// "0-3,6" for {0,1,2,3,6}.
std::string RangeList(const std::vector<int>& ids);
std::string Bytes(int64_t b);  // "1.5 GiB"

class HostAllocator {
 public:
  explicit HostAllocator(HostCapacity cap) : cap_(std::move(cap)) {}
  const HostCapacity& capacity() const { return cap_; }

  // OK, or FAILED_PRECONDITION saying (with the numbers) why the demand can
  // never fit this host however long it waits.
  Status CheckEverFits(const Demand& d) const;
  // Specific devices and slots for `d` from what is neither held nor in
  // `reserved`, or nullopt with *why ("waiting for 8 GPUs: 0-7 held by job
  // a-3"). GPUs: the lowest contiguous free block when one exists (peers on
  // one switch), else the lowest free ones.
  std::optional<Placement> TryPlace(const Demand& d, const Placement& reserved, std::string* why) const;
  // Sets aside for `d` whatever part of it is free now (the anti-starvation
  // reservation), adding to *reserved.
  void Reserve(const Demand& d, Placement* reserved) const;

  // Records a placement (a new one, or one restored after a restart). A
  // restored placement that overlaps another or names a device outside the
  // capacity is still held — the processes run where they run — and the
  // overlap is returned as an error to log.
  Status Hold(const std::string& job_id, const Placement& p);
  void Release(const std::string& job_id);
  const Placement* HeldBy(const std::string& job_id) const;
  const std::map<std::string, Placement>& held() const { return held_; }

 private:
  std::string OwnerOfGpu(int gpu) const;
  std::vector<int> FreeGpus(const Placement& reserved) const;
  std::vector<int> FreeSlots(const Placement& reserved) const;
  int64_t FreeBytes(const Placement& reserved) const;
  // "0-3 held by job a-1, 4 held by job b-2" for the busy devices.
  std::string Holders(const std::vector<int>& busy_gpus, bool gpus) const;

  HostCapacity cap_;
  std::map<std::string, Placement> held_;
};

}  // namespace shardd::sched
