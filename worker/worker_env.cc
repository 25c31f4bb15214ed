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

// torchrun's MASTER_ADDR and MASTER_PORT as host:port ("" when unset).
shard::StatusOr<std::string> MasterAddress(const EnvLookup& env) {
  const char* addr = env("MASTER_ADDR");
  if (!addr || !*addr) return std::string();
  const char* port = env("MASTER_PORT");
  if (!port || !*port) return shard::InvalidArgument(std::string("MASTER_ADDR=") + addr + " needs MASTER_PORT");
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(port, &end, 10);
  if (errno != 0 || *end != '\0' || x < 1 || x > 65535)
    return shard::InvalidArgument(std::string("MASTER_PORT='") + port + "' is not a port number");
  const std::string host = addr;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(x);
}

}  // namespace

shard::StatusOr<WorkerPlacement> ResolvePlacement(int flag_rank, int node_rank, int nproc_per_node, int local,
                                                  const EnvLookup& env) {
  if (nproc_per_node < 1) return shard::InvalidArgument("--nproc-per-node must be at least 1");
  WorkerPlacement p;
  ASSIGN_OR_RETURN(p.master, MasterAddress(env));
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
  ASSIGN_OR_RETURN(int torch_rank, IntVar(env, "RANK"));
  if (torch_rank >= 0) {
    if (nproc_per_node != 1)
      return shard::InvalidArgument("--nproc-per-node does not apply under torchrun: it starts one process per rank");
    ASSIGN_OR_RETURN(int world, IntVar(env, "WORLD_SIZE"));
    ASSIGN_OR_RETURN(int local_rank, IntVar(env, "LOCAL_RANK"));
    if (world >= 0 && torch_rank >= world)
      return shard::InvalidArgument("RANK=" + std::to_string(torch_rank) + " is not below WORLD_SIZE=" +
                                    std::to_string(world));
    p.rank = torch_rank;
    p.world_hint = world > 0 ? world : 0;
    p.local_rank = local_rank > 0 ? local_rank : 0;
    p.source = "RANK";
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
