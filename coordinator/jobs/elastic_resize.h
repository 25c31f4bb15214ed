// Elastic restarts (restart.min_world_size, restart.elastic_wait_s;
// docs/control-plane.md "Elastic restarts"), the coordinator's side:
//
//   shrink  an external restart (attempt 2 on) that has not gathered every
//           rank within elastic_wait_s of its first join ends (a rank whose
//           worker joined counts before it registers: it is starting up, and
//           the registration deadline judges it), and the next one runs on
//           the largest world size the joined ranks cover that the job
//           allows (shard/spec/elastic_world.h); the planner checks it first
//           (ControlLoop::RunLaunch, off the lock). Not charged as a restart.
//   join    a shrunk attempt hands a worker that asks for a rank beyond it a
//           free rank below it (after elastic_wait_s: first the ranks wait
//           for their own workers), or keeps it standing by (UNAVAILABLE: it asks
//           again) and counts it;
//   grow    at the next committed checkpoint, standby workers that cover a
//           larger allowed world end the attempt, and the next one runs on it.
//
// Jobs whose launcher starts the ranks (slurm) shrink and grow by the
// launcher's count of free places instead: elastic_launched.h.
//
// The world size each attempt trains with is the ranks' count the coordinator
// hands out (RegisterResponse.world_size); the worker derives its
// micro-batches per step from it (shard::JobAtWorldSize).
//
// Thread-safety: every function needs the table's lock held.
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/jobs/attempt_lifecycle.h"
#include "coordinator/jobs/job.h"
#include "coordinator/jobs/job_table.h"
#include "coordinator/jobs/elastic_rules.h"
#include "shard/spec/elastic_world.h"

namespace shardd::elastic {

// A standby worker that has not asked again for this long is not counted.
inline constexpr int64_t kStandbyFreshMs = 15000;
// A rank an elastic join handed out is held this long for its Register.
inline constexpr int64_t kClaimHoldMs = 15000;

// LAUNCHING, external, elastic: shrinks the attempt when elastic_wait_s has
// passed since its first join with some ranks missing. True when it ended
// the attempt (the caller then skips the health checks).
bool MaybeShrink(Job& j, int64_t now, JobTable* table, AttemptLifecycle* attempts);

// After the commit of `step`: grows a shrunk job back when enough workers
// stand by (external jobs; a launched job: MaybeGrowLaunched). True when it
// ended the attempt.
bool MaybeGrow(Job& j, int64_t step, int64_t now, AttemptLifecycle* attempts);

// The rank a joining worker takes in the current attempt: `rank` itself in a
// full-size attempt; in a shrunk one, `rank` when it is below the attempt's
// size and neither registered nor handed to another worker moments ago,
// else (once elastic_wait_s has passed since the attempt began: until then
// its ranks wait for their own workers) a free one below it, else
// UNAVAILABLE (stand by).
StatusOr<int> RankForJoin(Job& j, int rank, const std::string& host, int64_t now);

// The planner refused `world` (ControlLoop::RunLaunch): the next attempt runs
// at full size, and no smaller size is tried again for this job.
void RefuseUnfit(Job& j, int world, const std::string& why, JobTable* table);

// "continuing on 2 of 4 ranks: host b lost (ranks 2, 3 did not join within
// 3 s); micro-batches per step 1 → 2". Pure.
std::string DescribeShrink(const Job& j, int to, double waited_s);

}  // namespace shardd::elastic
