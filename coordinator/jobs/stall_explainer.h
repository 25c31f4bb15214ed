// Says why an attempt stalled, from what the ranks' flight recorders last
// reported with their heartbeats (JobRank::collectives): builds the pure
// diagnosis's input (stall_diagnosis.h) from the job, and states the cause
// once per attempt as a `stall_cause` event and in the job's status
// (JobStatus.stall: shardctl status, the dashboard). Called where the
// coordinator decides an attempt failed: a collective timed out (a rank's
// DEADLINE_EXCEEDED report), progress stopped while heartbeats went on (the
// hang watchdog), or a rank died (an exit, a missed heartbeat deadline).
//
// Thread-safety: needs the table's lock held (it reads and changes a Job).
// Nothing here waits: the records are already in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/jobs/job_table.h"
#include "coordinator/health/stall_diagnosis.h"

namespace shardd {

// `dead_rank` (-1: none) died as `dead_how` says, after "it " ("was killed by
// signal 9 (Killed)", "exited with code 1").
// Ranks that exited without reporting an error count as dead too; a rank
// that reported its error (a timeout) speaks through its records. Emits
// nothing for a one-rank attempt, a second time in one attempt, or when no
// rank has reported a collective.
void ExplainStall(JobTable* table, Job& j, StallTrigger trigger, int64_t now_ms, int dead_rank = -1,
                  const std::string& dead_how = "");

// The live ranks the others wait for in a stuck collective (StalledRanks
// over the job's records): whom the hang watchdog blames. Empty when the
// records name none.
std::vector<int> StalledRanksOf(const Job& j, int64_t now_ms);

// A reported error that is a collective's timeout (DEADLINE_EXCEEDED).
bool IsCollectiveTimeout(const std::string& error);

}  // namespace shardd
