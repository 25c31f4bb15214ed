// Periodic sharded checkpoints of a training run (see shard/ckpt for the
// format and the commit protocol). An async save snapshots this rank's shards
// to host memory (12 B/param, 6 with bf16 state; kept for the next save), then writes them on a
// background thread while training continues; at most one save is in flight.
// A synchronous save of an offloaded state writes straight from the host
// master and moments (no copy); of an on-device state, through a snapshot
// freed after the write. Rank 0 is the committer
// in standalone mode: it waits for every shard's report, writes COMMITTED and
// applies retention.
//
// Thread-safety: called from the training thread only.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shard/ckpt/checkpoint_tier.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/spec/param_layout.h"
#include "shard/spec/job_config.h"
#include "shard/train/optimizer_state.h"

namespace shard {

// Under the control plane the coordinator commits: each writer hands its
// written file (and the run state) to this hook, which reports it over RPC.
using CheckpointReportFn = std::function<Status(const Manifest& base, const std::string& step_dir,
                                                const std::vector<ManifestFile>& files, CheckpointTier tier)>;
// A memory step this rank could not write (a full tmpfs, a refused folder):
// called once with the step and why; training and disk checkpoints go on.
using MemorySkipFn = std::function<void(int64_t step, const std::string& reason)>;

struct CheckpointRole {
  int rank = 0;
  bool writer = true;     // writes a shard (replica 0 of each shard)
  bool committer = true;  // commits (rank 0, standalone mode only)
  CheckpointReportFn report;  // set: writers report here instead of anyone committing
  // The memory tier's job folder (checkpoint.memory; "" = no memory tier).
  std::string memory_dir;
  // How many folders memory_dir lies below the tier's root: 1 for <root>/<job>,
  // 2 for a per-host <root>/<job>/host-<name>. Each is opened and checked
  // (shard/common/owned_dir.h) before a memory step is written.
  int memory_depth = 1;
  MemorySkipFn memory_skipped;  // set: told of each skipped memory step
};

class Checkpointer {
 public:
  // The shards are read through `state` (on the device or offloaded to host).
  Checkpointer(const JobConfig& job, const CheckpointRole& role, OptimizerState* state, FsdpRuntime* runtime,
               const ParamLayout& layout);
  ~Checkpointer();

  // "<checkpoint.dir>/<job name>"
  std::string job_dir() const;
  // The tier's job folder: job_dir() or the memory tier's.
  std::string tier_dir(CheckpointTier tier) const;
  // Saves the current state as step `base.step` (base holds the run state:
  // data cursor, schedule, model identity) into the tier's folder. Fails if
  // the previous save failed. A memory step commits like a disk step; its
  // retention keeps checkpoint.memory.keep_last, and a committed disk step
  // drops the memory steps older than it.
  Status Save(const Manifest& base, CheckpointTier tier = CheckpointTier::kDisk);
  // Waits for the save in flight; returns its result.
  Status Wait();
  // Seconds the training thread spent inside Save (the stall).
  double stall_seconds() const { return stall_seconds_; }
  // The memory tier's share: its saves and their stall.
  int memory_saves() const { return memory_saves_; }
  // Memory steps this rank could not write and skipped (each said once in
  // the log and to memory_skipped): a memory tier that cannot be written
  // never fails a run whose disk tier works.
  int memory_skips() const { return memory_skips_.load(); }
  double memory_stall_seconds() const { return memory_stall_seconds_; }

 private:
  // data: per unit, the owned shard's real part (params, m, v) in host memory.
  Status WriteAndCommit(const Manifest& base, const std::vector<ShardUnitData>& data, CheckpointTier tier);
  // The step's folder, created: a disk step's under job_dir(), a memory
  // step's in the opened and checked memory folders (0700).
  StatusOr<std::string> MakeStepDir(int64_t step, CheckpointTier tier) const;
  // Writes this rank's shard and its report file; then reports it (role_.report).
  Status WriteShard(const Manifest& base, const std::vector<ShardUnitData>& host, const std::string& step_dir,
                    CheckpointTier tier, bool* reported);
  // A memory step that could not be written or committed: said once, counted.
  void SkipMemoryStep(int64_t step, const Status& why);
  // Committer: the tier's retention after `base` committed in it.
  Status Retain(const Manifest& base, CheckpointTier tier);
  // Save on a backend that holds no data (Backend::holds_data): counts the snapshot only.
  Status SimulateSnapshot();

  JobConfig job_;
  CheckpointRole role_;
  OptimizerState* state_;
  FsdpRuntime* runtime_;
  ParamLayout layout_;
  std::thread thread_;
  // params, m, v per unit as held (fp32 or bf16 bytes); reused across saves
  std::vector<std::vector<uint8_t>> snapshot_;
  std::vector<HostBuffer> sim_snapshot_;      // the simulator's stand-in for snapshot_
  Status async_status_;
  double stall_seconds_ = 0;
  int memory_saves_ = 0;
  std::atomic<int> memory_skips_{0};  // written by the save thread
  double memory_stall_seconds_ = 0;
};

}  // namespace shard
