// Elastic restarts of jobs whose launcher starts the ranks (resources.
// launcher: slurm; docs/control-plane.md "Elastic restarts"). The external
// side (elastic_resize.h) counts the workers that joined; here the launcher
// counts the places it could give the job now (Launcher::Capacity: a Slurm
// partition's free CPUs and GPUs on usable nodes, in whole nodes of the job's
// tasks), asked off the lock by the control loop (AttemptRunner::Observe)
// only while a resize may help:
//
//   shrink  a restart (attempt 2 on) still not running on all its ranks
//           elastic_wait_s after it began (its allocation PENDING, ranks that
//           never register) ends when the launcher can place fewer ranks than
//           it asks for; the next attempt runs at the largest allowed W' the
//           free places cover (shard::DecideElasticWorld), planner-checked
//           like an external shrink (ControlLoop::CheckElasticFit). Not
//           charged as a restart.
//   size    a launcher that can tell before launching (SizesRestartsBefore-
//           Launch: the local launcher, whose GPUs may be gone) is asked
//           before every restart of an elastic job; the restart launches at
//           the largest allowed W' its count covers (shrunk, or grown back).
//   grow    a shrunk attempt whose launcher could place a larger allowed
//           world (its own places counted as free: they are released first)
//           ends at the next committed checkpoint, and the next one runs on it.
//
// Thread-safety: every function needs the table's lock held.
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/jobs/attempt_lifecycle.h"
#include "coordinator/jobs/elastic_rules.h"
#include "coordinator/jobs/job.h"
#include "coordinator/jobs/job_table.h"
#include "coordinator/sched/host_allocator.h"

namespace shardd::elastic {

// A count older than this is not acted on (the launcher rate-limits its own
// questions to its poll interval).
inline constexpr int64_t kCapacityFreshMs = 15000;

// WantsCapacity and CapacityRequest (what AttemptRunner and the control
// loop ask) are in elastic_rules.h: the runner includes no file that
// includes the attempt lifecycle.
// Records the answer.
void NoteCapacity(Job& j, const StatusOr<int>& ranks, int64_t now);

// LAUNCHING, launcher-managed, elastic: shrinks the attempt when it has not
// run on all its ranks within elastic_wait_s of its start and the launcher
// can place fewer. True when it ended the attempt.
bool MaybeShrinkLaunched(Job& j, int64_t now, JobTable* table, AttemptLifecycle* attempts);

// Before a restart's launch (RESTARTING, off the lock: the control loop asks
// the launcher): whether to ask, and with what. The request carries what the
// launch would (the placement's CUDA_VISIBLE_DEVICES: AddEnv fills it).
bool WantsCapacityBeforeLaunch(const Job& j);
// Records the answer and sets the restart's size (j.elastic.next_world) by it, with
// an elastic_shrink / elastic_grow / elastic_refused event. Returns the world
// the restart will launch at.
int SizeRestart(Job& j, const StatusOr<int>& ranks, int64_t now, JobTable* table);

// After the commit of `step`: grows a shrunk launcher-managed job back when
// its launcher can place more. True when it ended the attempt.
bool MaybeGrowLaunched(Job& j, int64_t step, int64_t now, AttemptLifecycle* attempts);

// "continuing on 1 of 2 ranks: slurm job 42 PENDING (Resources) for 5 s; 1
// of 2 ranks placeable; micro-batches per step 1 → 2 (global batch 2 kept)". Pure.
std::string DescribeLaunchedShrink(const Job& j, int to, double waited_s);

}  // namespace shardd::elastic
