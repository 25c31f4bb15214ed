// Where a worker sits in its job, from its flags and its launcher's
// environment: an explicit --rank (or SHARDD_RANK), else Slurm's SLURM_PROCID
// (srun starts one task per rank), else torchrun's RANK (with WORLD_SIZE and
// LOCAL_RANK), else a Kubernetes Indexed Job's JOB_COMPLETION_INDEX (one pod
// per node, --nproc-per-node workers in it), else rank 0. torchrun's
// MASTER_ADDR/MASTER_PORT name the one address every rank meets at: here the
// coordinator (which serves the rendezvous), used when --coordinator is not given.
//
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <string>

#include "shard/common/status.h"

namespace shardd {

struct WorkerPlacement {
  int rank = 0;
  int local_rank = 0;        // index among this host's workers
  int world_hint = 0;        // how many ranks the launcher started (SLURM_NTASKS); 0 = unknown
  std::string launcher_id;   // "slurm job 42", "pod train-a1-0", ...
  std::string source;        // which flag or variable gave the rank (for messages)
  std::string master;        // MASTER_ADDR:MASTER_PORT ("" when MASTER_ADDR is unset)
};

using EnvLookup = std::function<const char*(const char*)>;

// flag_rank < 0: not given. node_rank < 0: not given. local: this process's
// index under --nproc-per-node (0 without it).
shard::StatusOr<WorkerPlacement> ResolvePlacement(int flag_rank, int node_rank, int nproc_per_node, int local,
                                                  const EnvLookup& env);

}  // namespace shardd
