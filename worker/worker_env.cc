#include "worker/worker_env.h"

#include <cerrno>
#include <cstdlib>

namespace shardd {
namespace {

// Reads a non-negative integer variable; absent → -1.
shard::StatusOr<int> IntVar(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > 1 << 24)
    return shard::InvalidArgument(std::string(name) + "='" + v + "' is not a rank number");
  return static_cast<int>(x);
}

}  // namespace

shard::StatusOr<WorkerPlacement> ResolvePlacement(int flag_rank, int node_rank, int nproc_per_node, int local,
                                                  const EnvLookup& env) {
  if (nproc_per_node < 1) return shard::InvalidArgument("--nproc-per-node must be at least 1");
  WorkerPlacement p;
  p.local_rank = local;
  if (flag_rank >= 0) {
    if (nproc_per_node != 1) return shard::InvalidArgument("--rank names one worker; with --nproc-per-node give --node-rank");
    p.rank = flag_rank;
    p.source = "--rank";
    return p;
  }
  ASSIGN_OR_RETURN(int procid, IntVar(env, "SLURM_PROCID"));
  if (procid >= 0) {
    if (nproc_per_node != 1)
      return shard::InvalidArgument("--nproc-per-node does not apply under srun: srun starts one task per rank");
    ASSIGN_OR_RETURN(int ntasks, IntVar(env, "SLURM_NTASKS"));
    ASSIGN_OR_RETURN(int localid, IntVar(env, "SLURM_LOCALID"));
    p.rank = procid;
    p.world_hint = ntasks > 0 ? ntasks : 0;
    p.local_rank = localid > 0 ? localid : 0;
    const char* job = env("SLURM_JOB_ID");
    if (job && *job) p.launcher_id = std::string("slurm job ") + job;
    p.source = "SLURM_PROCID";
    return p;
  }
  int node = node_rank;
  p.source = "--node-rank";
  if (node < 0) {
    ASSIGN_OR_RETURN(node, IntVar(env, "JOB_COMPLETION_INDEX"));
    p.source = "JOB_COMPLETION_INDEX";
    if (node >= 0) {
      const char* pod = env("HOSTNAME");
      if (pod && *pod) p.launcher_id = std::string("pod ") + pod;
    }
  }
  if (node < 0) {
    node = 0;
    p.source = "default";
  }
  p.rank = node * nproc_per_node + local;
  return p;
}

}  // namespace shardd
