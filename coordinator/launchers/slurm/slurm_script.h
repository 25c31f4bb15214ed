// Renders the sbatch script of one attempt: the allocation (nodes, tasks,
// GPUs, partition, time, account, requeue, the early-warning signal), then
// `srun shardd-worker` with one task per rank. Pure: the same inputs give the
// same text, which `shardctl render slurm` prints and tests read.
//
// The batch shell traps SIGUSR1 (sent by Slurm signal_s seconds before the
// time limit, or by `scancel --signal=USR1 --batch`) and passes it on to the
// workers, which checkpoint their step and exit with code 5; the coordinator
// then starts the next attempt from that checkpoint.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "coordinator/launchers/launcher.h"

namespace shardd {

// "shardd-<job id>-a<attempt>": how the launcher finds its Slurm job again.
std::string SlurmJobName(const std::string& job_id, int attempt);

// The script for `req` (req.resources.slurm holds the settings; the worker
// token is not in it: sbatch passes the environment through).
std::string RenderSbatchScript(const LaunchRequest& req);

}  // namespace shardd
