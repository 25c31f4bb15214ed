// What Slurm says about one job, parsed from `scontrol show job -o ID` (or
// `sacct -n -P -X -o JobID,State,ExitCode,Reason` where accounting keeps
// finished jobs), and how its state maps onto an attempt's outcome.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "shard/common/status.h"

namespace shardd {

struct SlurmJobInfo {
  std::string state;   // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, ...
  std::string reason;  // Reason=... ("None" when none)
  int exit_code = 0;   // ExitCode=X:Y → X (the batch script's code)
  int signal = 0;      //                → Y
  int restarts = 0;    // Restarts=N (requeues)
};

// Parses one-line `scontrol show job -o` output (KEY=VALUE fields).
shard::StatusOr<SlurmJobInfo> ParseScontrolJob(const std::string& text);
// Parses `sacct -n -P -X -o State,ExitCode` output: "CANCELLED by 0|0:15".
shard::StatusOr<SlurmJobInfo> ParseSacctJob(const std::string& text);

// True once the job will not run again by itself.
bool SlurmStateFinal(const std::string& state);
// True while it waits for or holds an allocation.
bool SlurmStateActive(const std::string& state);

}  // namespace shardd
