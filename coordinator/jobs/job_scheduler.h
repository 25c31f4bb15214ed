// The scheduler glue: which local jobs hold which GPUs, CPU slots and host
// memory (coordinator/sched), who launches next, and the placements restored
// after a coordinator restart. The allocator and the queue are pure; this
// class applies their decisions to the job table.
//
// A job is placed before its first launch and keeps its placement through
// its restarts (RESTARTING waits out its backoff on its own devices), until
// it has ended and its last attempt's processes are gone (draining_attempt
// cleared): only then can another job's ranks land on those devices.
//
// Thread-safety: every method but DemandFor needs the table's lock held.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "coordinator/jobs/job_table.h"
#include "coordinator/sched/host_allocator.h"

namespace shardd {

class JobScheduler {
 public:
  JobScheduler(const JobManagerOptions& opts, JobTable* table);
  // Null: no local capacity configured, no local scheduling.
  const sched::HostAllocator* allocator() const { return alloc_.get(); }
  // A new job's demand on this host (nullopt: not scheduled here), or why it
  // can never run here. No lock: the capacity is fixed at start.
  StatusOr<std::optional<sched::Demand>> DemandFor(const shard::JobConfig& config, int64_t host_bytes,
                                                   const std::string& src) const;

  // ---- with the table's lock held ----
  // Releases what ended jobs held, starts placements for waiting jobs in
  // queue order and announces why the others wait.
  void Schedule(int64_t now);
  // The job may go on to launch: not scheduled here, or holding its placement.
  static bool MayLaunch(const Job& j) { return !j.placement.demand || j.placement.placed; }
  void StoreResources(const Job& j);
  // After Recover loaded the jobs: the stored demand and placement back into
  // the allocator (adopted and restarting attempts keep their devices).
  Status RestorePlacements();
  // The environment a launch gets from the job's placement.
  void AddPlacementEnv(const Job& j, LaunchRequest* req) const;

 private:
  const JobManagerOptions& opts_;
  JobTable* table_;
  std::unique_ptr<sched::HostAllocator> alloc_;  // guarded by the table's lock
};

}  // namespace shardd
