// What the local scheduler keeps of one job (coordinator/jobs/job_scheduler.h
// applies it): its demand, whether the allocator holds its devices, and its
// place in the queue. Plain data, guarded by JobTable's lock like the rest of
// the Job.
#pragma once

#include <optional>
#include <string>

#include "coordinator/sched/host_allocator.h"

namespace shardd::sched {

struct JobPlacement {
  // Null demand: not scheduled here (another launcher, or no capacity
  // configured). `placed`: the allocator holds the job's devices, from its
  // first launch through restarts and backoff until its last attempt's
  // processes are gone.
  std::optional<Demand> demand;
  bool placed = false;
  int queue_position = 0;  // 1 = next to start
  std::string reason;      // why it waits, as last announced
};

}  // namespace shardd::sched
