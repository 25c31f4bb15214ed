#include "shard/spec/elastic_world.h"

#include <algorithm>

namespace shard {

int MinWorldSize(const JobConfig& job) {
  return job.restart.min_world_size > 0 ? job.restart.min_world_size : job.parallel.world_size;
}

int ElasticRankUnit(const JobConfig& job) {
  if (job.resources.launcher != Launcher::kSlurm) return 1;
  const SlurmConfig& c = job.resources.slurm;
  // One node of CPU workers: its task count is the world size.
  if (c.tasks_per_node == 0 && c.gpus_per_node == 0 && c.nodes <= 1) return 1;
  return std::max(1, c.TasksPerNode(job.parallel.world_size));
}

std::string WhyNotWorldSize(const JobConfig& job, int world) {
  const int full = job.parallel.world_size, min = MinWorldSize(job);
  if (world < 1 || world > full)
    return std::to_string(world) + " is outside 1.." + std::to_string(full) + " (parallel.world_size)";
  if (world < min) return "below restart.min_world_size " + std::to_string(min);
  const int g = job.parallel.shard_group_size;
  if (job.parallel.strategy == ShardStrategy::kHybridShard && g > 0 && world % g != 0)
    return "hybrid_shard needs a multiple of parallel.shard_group_size " + std::to_string(g);
  if (const int unit = ElasticRankUnit(job); world % unit != 0)
    return "resources.slurm runs " + std::to_string(unit) + " task(s) per node: a multiple of " + std::to_string(unit);
  const int64_t per_step = job.train.micro_batch * world;
  if (job.train.global_batch % per_step != 0)
    return "train.global_batch " + std::to_string(job.train.global_batch) + " is not a multiple of micro_batch " +
           std::to_string(job.train.micro_batch) + " x " + std::to_string(world);
  return "";
}

std::vector<int> AllowedWorldSizes(const JobConfig& job) {
  std::vector<int> out;
  for (int w = job.parallel.world_size; w >= 1; --w)
    if (WhyNotWorldSize(job, w).empty()) out.push_back(w);
  return out;
}

int64_t MicroBatchesPerStep(const JobConfig& job, int world) {
  const int64_t per_step = job.train.micro_batch * (world > 0 ? world : 1);
  return per_step > 0 ? job.train.global_batch / per_step : 0;
}

ElasticDecision DecideElasticWorld(const JobConfig& job, int available) {
  ElasticDecision d;
  const int full = job.parallel.world_size, min = MinWorldSize(job);
  if (min >= full) {
    d.refusal = "elastic restarts are off (restart.min_world_size is parallel.world_size " + std::to_string(full) + ")";
    return d;
  }
  if (available >= full) {
    d.world = full;
    return d;
  }
  for (int w : AllowedWorldSizes(job)) {
    if (w <= available) {
      d.world = w;
      return d;
    }
  }
  // The smallest allowed size says what would have been enough.
  const std::vector<int> allowed = AllowedWorldSizes(job);
  d.refusal = std::to_string(available) + " of " + std::to_string(full) +
              " rank(s) available, fewer than the smallest world size the job allows (" +
              std::to_string(allowed.empty() ? full : allowed.back()) + ": restart.min_world_size " +
              std::to_string(min) + ", its sharding and train.global_batch)";
  return d;
}

StatusOr<JobConfig> JobAtWorldSize(const JobConfig& job, int world) {
  if (world == job.parallel.world_size) return job;
  if (const std::string why = WhyNotWorldSize(job, world); !why.empty())
    return InvalidArgument("cannot train job " + job.name + " on " + std::to_string(world) + " of " +
                           std::to_string(job.parallel.world_size) + " ranks: " + why);
  JobConfig at = job;
  at.parallel.world_size = world;
  if (const int unit = ElasticRankUnit(job); job.resources.launcher == Launcher::kSlurm && unit > 1) {
    at.resources.slurm.tasks_per_node = unit;
    at.resources.slurm.nodes = world / unit;
  }
  return at;
}

Status CheckElasticConfig(const JobConfig& job) {
  const int full = job.parallel.world_size, min = job.restart.min_world_size;
  if (min == 0 || min == full) return OkStatus();
  if (min > full)
    return InvalidArgument("restart.min_world_size " + std::to_string(min) + " exceeds parallel.world_size " +
                           std::to_string(full));
  // External: the coordinator shrinks an attempt to the ranks that joined
  // it. Slurm: to the ranks its partition can place (SlurmLauncher::Capacity).
  // Local: to the job's GPUs still on the host (LocalLauncher::Capacity).
  if (job.resources.launcher == Launcher::kLocal && job.resources.device.is_cpu())
    return InvalidArgument("restart.min_world_size " + std::to_string(min) +
                           " < parallel.world_size: CPU ranks of the local launcher keep their slots through "
                           "restarts and are never short of places (resources.device cpu)");
  if (job.resources.launcher == Launcher::kLocal && job.resources.device.index >= 0)
    return InvalidArgument("restart.min_world_size " + std::to_string(min) + " < parallel.world_size: every rank "
                           "shares resources.device " + job.resources.device.ToString() +
                           ", so fewer ranks need no fewer GPUs");
  if (job.resources.launcher == Launcher::kKubernetes)
    return InvalidArgument("restart.min_world_size " + std::to_string(min) +
                           " < parallel.world_size needs resources.launcher external or slurm (Kubernetes says a pod "
                           "is unschedulable, not how many would fit)");
  const std::vector<int> allowed = AllowedWorldSizes(job);
  if (allowed.size() < 2)
    return InvalidArgument("restart.min_world_size " + std::to_string(min) + ": no world size from " +
                           std::to_string(min) + " to " + std::to_string(full - 1) + " fits this job (" +
                           WhyNotWorldSize(job, min) + ")");
  return OkStatus();
}

}  // namespace shard
