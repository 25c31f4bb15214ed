// The local host's queue: which waiting jobs start now, on what, and why the
// others wait. A pure function of the waiting jobs, the allocator and the
// time, so tests drive it with a fake clock.
//
// Order: higher priority first, then first come first served (enqueue time,
// then submission number). A job that does not fit lets later ones that do
// fit start (backfill) — until it has waited longer than starvation_ms: then
// whatever part of its demand is free is reserved for it and later jobs may
// use only the rest, so a stream of small jobs cannot starve a large one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/sched/host_allocator.h"

namespace shardd::sched {

struct QueueEntry {
  std::string job_id;
  int priority = 0;
  int64_t enqueued_ms = 0;
  int64_t number = 0;  // submission order, the last tie-break
  Demand demand;
};

struct QueueOptions {
  int64_t starvation_ms = 10 * 60 * 1000;  // a head blocked this long gets a reservation
};

struct QueueDecision {
  std::vector<std::pair<std::string, Placement>> start;  // in queue order; not yet held
  std::map<std::string, std::string> waiting;            // job -> why it waits
  std::vector<std::string> order;                        // every entry, queue order
};

// Sorts entries into queue order (stable for equal keys).
void SortQueue(std::vector<QueueEntry>* entries);

// Decides one round. Does not change `alloc`: the caller Holds what it starts.
QueueDecision DecideQueue(std::vector<QueueEntry> entries, const HostAllocator& alloc, int64_t now_ms,
                          const QueueOptions& opts);

}  // namespace shardd::sched
