// What both sides of elastic restarts share (the external side,
// elastic_resize.h, and the launched side, elastic_launched.h): the size to
// continue at, the refusal said once per attempt, and how the micro-batches
// change. Neither side includes the other; both include this.
//
// Thread-safety: every function needs the table's lock held.
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/jobs/job.h"
#include "coordinator/jobs/job_table.h"
#include "coordinator/sched/host_allocator.h"
#include "shard/spec/elastic_world.h"

namespace shardd::elastic {

// "micro-batches per step 1 → 2 (global batch 8 kept)". Pure.
std::string MicroBatchChange(const Job& j, int from, int to);

// shard::DecideElasticWorld for `available` ranks, less the sizes the planner
// refused for this job already (RefuseUnfit: that size and every smaller one).
shard::ElasticDecision DecideFitWorld(const Job& j, int available);

// Says once per attempt (an elastic_refused event) that the attempt cannot
// continue on fewer ranks, and why; it waits for all `world`. False.
bool RefuseShrinkOnce(Job& j, const std::string& why, int world, JobTable* table);

// Whether the job's launcher sizes its elastic restarts (not external, elastic on).
bool Launched(const Job& j);
// restart.elastic_wait_s in milliseconds.
int64_t WaitMs(const Job& j);
// A restart (attempt 2 on) that has waited elastic_wait_s without running on all its ranks.
bool ShrinkDue(const Job& j, int64_t now);
// An attempt running (or launching) on fewer ranks than parallel.world_size.
bool Shrunk(const Job& j);

// Whether the control loop should ask the job's launcher for its capacity now
// (AttemptRunner::Observe): a restart waiting past elastic_wait_s, or an
// attempt running shrunk.
bool WantsCapacity(const Job& j, int64_t now);
// What Capacity() is asked: the full world in the job's own shape, its
// current attempt's places counted as free, and the environment its
// placement on this host gives a launch (the local launcher's GPUs; alloc
// null or the job not placed: none).
LaunchRequest CapacityRequest(const Job& j, const sched::HostAllocator* alloc);

}  // namespace shardd::elastic
