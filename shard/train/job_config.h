// The job file: one typed struct per section, mapped strictly from YAML (an
// unknown key or a wrong type is an error naming the file and the dotted key).
// Relative paths are taken relative to the current directory.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/data/data_config.h"
#include "shard/optim/optim_config.h"

namespace shard {

struct ModelSource {
  std::string preset;   // a LlamaPreset name
  std::string from_hf;  // an HF folder: config.json + safetensors
  Status Validate() const;
};

struct TrainConfig {
  int64_t steps = 100;
  int64_t global_batch = 8;  // sequences per optimizer step, over all ranks
  int64_t micro_batch = 8;   // sequences per forward/backward on one rank
  uint64_t seed = 1234;
  std::string precision = "auto";  // auto | fp32 | bf16 | fp16
  int64_t log_every = 10;
  OptimConfig optim;
  Status Validate() const;
};

struct ParallelConfig {
  std::string strategy = "full_shard";  // full_shard | shard_grad_op | no_shard | hybrid_shard
  int world_size = 1;
  int shard_group_size = 0;  // hybrid_shard: ranks per shard group (0 = all)
  bool activation_checkpointing = false;
  bool offload_optimizer = false;
  double comm_timeout_s = 300;  // longest any collective may block
  Status Validate() const;
};

struct CheckpointConfig {
  std::string dir = "runs";
  int64_t every_steps = 0;  // 0 = no periodic checkpoints
  int keep_last = 3;
  bool async = true;
  // Where to start from: "auto" (the newest good committed step of this job in
  // dir, else from scratch), "none" (always from scratch), or a step directory.
  std::string resume = "auto";
  Status Validate() const;
};

struct ResourcesConfig {
  std::string launcher = "local";  // local | slurm | kubernetes | external
  std::string device = "auto";     // auto | cpu | cuda
  std::string cluster;             // a cluster of configs/hardware for the planner ("" = this host)
};

struct RestartConfig {
  int max_restarts = 5;
  double backoff_s = 1.0;
  double heartbeat_timeout_s = 10.0;
  double hang_timeout_s = 300.0;
};

struct ExportConfig {
  std::string hf_dir;         // write the trained model here as an HF folder ("" = don't)
  std::string dtype = "fp32"; // fp32 | bf16 | fp16
};

struct JobConfig {
  std::string name = "job";
  ModelSource model;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  ResourcesConfig resources;
  RestartConfig restart;
  ExportConfig export_;
  std::string source;  // the file it came from

  // Cross-section checks (e.g. global_batch divisible by micro_batch * world).
  Status Validate() const;
};

// Loads a job file, applying `--set key=value` overrides first.
StatusOr<JobConfig> LoadJobConfig(const std::string& path, const std::vector<std::string>& overrides = {});
StatusOr<JobConfig> ParseJobConfig(const std::string& yaml_text, const std::string& name,
                                   const std::vector<std::string>& overrides = {});

}  // namespace shard
