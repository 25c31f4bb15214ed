// The two checkpoint tiers (docs/control-plane.md, "Checkpoint tiers"): disk
// (checkpoint.dir, every checkpoint.every_steps) and memory (a tmpfs folder,
// every checkpoint.memory.every_steps). Both hold steps in one format and
// commit by one protocol (committer.h); they differ in where the folder is,
// how many steps each keeps, and that a memory step older than the newest
// committed disk step is worth nothing (dropped).
//
// Thread-safety: pure functions over files.
#pragma once

#include <cstdint>
#include <string>

#include "shard/ckpt/catalog.h"
#include "shard/common/status.h"

namespace shard {

enum class CheckpointTier { kDisk = 0, kMemory = 1 };

// "disk" | "memory" (events, shardctl checkpoints' TIER column, the state store).
const char* CheckpointTierName(CheckpointTier tier);
// The inverse; nullopt-like: false for any other name.
bool ParseCheckpointTier(const std::string& name, CheckpointTier* tier);

struct TieredStep {
  std::string dir;  // "" = none found
  int64_t step = -1;
  CheckpointTier tier = CheckpointTier::kDisk;
};

// The newest committed step that opens (and verifies) in either tier: the
// memory tier's when it is newer than every good disk step, else the disk's.
// memory_dir "" = no memory tier. A disk step is only opened when it is newer
// than the memory step found (the memory step is read first: cheap on tmpfs).
// NOT_FOUND when neither tier holds one (the disk tier's message).
StatusOr<TieredStep> FindLatestGoodTieredStep(const std::string& disk_dir, const std::string& memory_dir,
                                              bool verify_checksums, const StepFilter& accept = {});

// The memory tier's retention beyond keep_last: deletes the run's steps
// (committed or not) older than `floor` — the newest committed disk step —
// from memory_dir, uncommitting each first. Another run's steps stay.
Status DropMemoryStepsBefore(const std::string& memory_dir, int64_t floor, const std::string& run_fingerprint);

// When the job ends: removes the memory tier's job folder and everything in it
// (never through a link). A missing folder is fine.
Status RemoveMemoryTier(const std::string& memory_dir);

}  // namespace shard
