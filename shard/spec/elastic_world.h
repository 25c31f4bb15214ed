// Elastic restarts (restart.min_world_size, restart.elastic_wait_s): which
// world sizes a job may run at, which one the next attempt takes when only
// some ranks are available, and the job as a worker trains it at the world
// size the coordinator handed out. Pure functions of the job file.
//
// A world size W' is allowed when min_world_size <= W' <= parallel.world_size,
// the sharding can be cut that way (hybrid_shard: a multiple of
// shard_group_size) and train.global_batch stays whole: a multiple of
// train.micro_batch x W'. The global batch, the data order (the sampler's
// cursor is world-independent, shard/train/batch_source.h) and the run
// fingerprint (shard/spec/run_fingerprint.h leaves the parallel layout out)
// are the same at every W'; each rank runs global_batch / (micro_batch x W')
// micro-batches per step instead.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/job_config.h"

namespace shard {

// restart.min_world_size with 0 resolved: parallel.world_size (elastic off).
int MinWorldSize(const JobConfig& job);
inline bool ElasticEnabled(const JobConfig& job) { return MinWorldSize(job) < job.parallel.world_size; }

// The ranks a launcher adds or drops together: a Slurm node's tasks when the
// job fixes them (tasks_per_node, gpus_per_node, or several nodes), else 1
// (external workers; a one-node Slurm job of CPU workers, whose task count
// is the world size).
int ElasticRankUnit(const JobConfig& job);

// "" when the job may run on `world` ranks, else why not (one phrase:
// "hybrid_shard needs a multiple of parallel.shard_group_size 2").
std::string WhyNotWorldSize(const JobConfig& job, int world);
// Every allowed world size, largest first (parallel.world_size always among them).
std::vector<int> AllowedWorldSizes(const JobConfig& job);
// Micro-batches each rank runs per optimizer step at `world` ranks.
int64_t MicroBatchesPerStep(const JobConfig& job, int world);

// The next attempt's size when `available` of the job's ranks can be placed.
struct ElasticDecision {
  int world = 0;         // 0: refused (see refusal)
  std::string refusal;   // one line: why the job cannot continue on fewer ranks
};
ElasticDecision DecideElasticWorld(const JobConfig& job, int available);

// The job as it trains on `world` ranks: parallel.world_size set to it, and
// the launcher's shape with it (resources.slurm: world / ElasticRankUnit
// nodes of the same tasks each), after checking it is allowed
// (InvalidArgument naming the rule otherwise). The worker applies it to the
// world size its RegisterResponse carries; the coordinator launches with its
// resources.
StatusOr<JobConfig> JobAtWorldSize(const JobConfig& job, int world);

// JobConfig::Validate's part: min_world_size in [1, world_size], and below
// world_size at least one smaller allowed size and a launcher that supports
// it: external, slurm, and local GPU ranks (a GPU of the job may be gone at a
// restart; CPU ranks and a pinned cuda:N are never short of places;
// Kubernetes gives no count of the pods that would fit: docs/control-plane.md
// "Elastic restarts").
Status CheckElasticConfig(const JobConfig& job);

}  // namespace shard
