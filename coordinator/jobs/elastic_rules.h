// What both sides of elastic restarts share (the external side,
// elastic_resize.h, and the launched side, elastic_launched.h): the size to
// continue at, the refusal said once per attempt, and how the micro-batches
// change. Neither side includes the other; both include this.
//
// Thread-safety: every function needs the table's lock held.
#pragma once

#include <string>

#include "coordinator/jobs/job.h"
#include "coordinator/jobs/job_table.h"
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

}  // namespace shardd::elastic
