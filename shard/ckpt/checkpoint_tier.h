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
#include <vector>

#include "shard/ckpt/catalog.h"
#include "shard/common/owned_dir.h"
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
// committed steps of both tiers that `accept` takes, newest first (the memory
// step first of two of one number), each opened until one is good; older
// steps are not opened (a verify reads every byte of the step). memory_dir ""
// = no memory tier. Each step passed over because it does not open or verify
// adds one line to *skipped (when given): "skipping step 530 (memory):
// <why>" — the resume's fallback events (issue 39 item 6).
// NOT_FOUND when neither tier holds one (the disk tier's message).
StatusOr<TieredStep> FindLatestGoodTieredStep(const std::string& disk_dir, const std::string& memory_dir,
                                              bool verify_checksums, const StepFilter& accept = {},
                                              std::vector<std::string>* skipped = nullptr);

// "skipping step N (tier): why" — one fallback of a resume, as events say it.
std::string SkippedStepLine(int64_t step, CheckpointTier tier, const std::string& why);

// Every deletion below opens the tier's folder first (shard/common/owned_dir.h:
// the user's own, no link, writable by nobody else; memory_dir's parent is
// taken as the root) and deletes only inside that opened folder. A folder
// that is refused is named in the error and nothing in it is touched.

// Opens memory_dir, `depth` folders below the tier's root (1: <root>/<job>;
// 2: <root>/<job>/host-<name>), checking the root and each folder below it;
// with `create`, missing ones are made 0700.
StatusOr<OwnedDir> OpenMemoryTierDir(const std::string& memory_dir, int depth, bool create);

// The memory tier's retention: ApplyRetention (committer.h) inside the
// opened memory_dir. A missing folder is fine.
Status ApplyMemoryRetention(const std::string& memory_dir, int keep_last, const std::string& run_fingerprint);

// The memory tier's retention beyond keep_last: deletes the run's steps
// (committed or not) older than `floor` — the newest committed disk step —
// from memory_dir, uncommitting each first. Another run's steps stay.
Status DropMemoryStepsBefore(const std::string& memory_dir, int64_t floor, const std::string& run_fingerprint);

// When the job ends: removes the memory tier's job folder and everything in it
// (never through a link), from inside its opened parent. A missing folder is fine.
Status RemoveMemoryTier(const std::string& memory_dir);

// Deletes the step folder `name` of the opened folder `dir_fd` (`path`
// names it in messages): uncommitted first (COMMITTED goes, so a crash
// mid-delete leaves garbage, never a broken step), then emptied and removed,
// never through a link (a link is removed as a link). Missing is fine.
Status DeleteStepAt(int dir_fd, const std::string& name, const std::string& path);

}  // namespace shard
