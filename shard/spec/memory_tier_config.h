// The job file's checkpoint.memory: section — the in-memory checkpoint tier
// (docs/control-plane.md, "Checkpoint tiers").
//
//   checkpoint: {every_steps: 200, memory: {every_steps: 5, keep_last: 2}}
//
// Every memory.every_steps steps each rank writes its shard into a folder on
// host memory (tmpfs) in the disk tier's format (shard files, checksums,
// COMMITTED manifest); the committer commits it as it commits a disk step. A
// restart resumes from the newest committed step of either tier. A step due
// in both tiers is written to disk only. Off (every_steps 0) by default.
#pragma once

#include <cstdint>
#include <string>

#include "shard/common/status.h"

namespace shard {

class YamlMap;

// The default root of memory-tier folders: tmpfs on Linux, one per user
// ("/dev/shm/shardd-<effective uid>"), created 0700: /dev/shm is anyone's, so
// a shared root could be pre-created or linked by another user
// (shard/common/owned_dir.h refuses such a folder).
std::string DefaultMemoryTierRoot();

struct MemoryTierConfig {
  int64_t every_steps = 0;  // 0 = no memory tier
  // The root of the tier's job folders; "" = DefaultMemoryTierRoot(). The
  // job's folder is <dir>/<job id>-<hash> under a coordinator, one per job
  // (MemoryCheckpointJobDir). The root and every folder below it must be the
  // job user's own, not links, and writable by nobody else
  // (shard/common/owned_dir.h); they are made 0700.
  std::string dir;
  int keep_last = 2;  // committed memory steps kept (the disk tier keeps its own checkpoint.keep_last)
  // Copies of each shard sent to a partner rank on another host (0 or 1):
  // when the job's ranks span hosts each writer sends its memory shard to
  // its partner (shard/ckpt/partner_map.h, shard/ckpt/shard_copy.h) and a
  // step commits only when every copy landed; on one host a copy would share
  // the host's fate, so none is made.
  int replicas = 1;

  bool enabled() const { return every_steps > 0; }
  // Messages start with "checkpoint.memory.<key>".
  Status Validate() const;
};

// Maps checkpoint.memory: inside the checkpoint: section (absent: the defaults).
Status MapMemoryTierSection(YamlMap& checkpoint, MemoryTierConfig* memory);

}  // namespace shard
