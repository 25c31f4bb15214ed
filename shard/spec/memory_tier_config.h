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

// The default root of memory-tier folders: tmpfs on Linux.
inline constexpr const char* kDefaultMemoryTierRoot = "/dev/shm/shardd";

struct MemoryTierConfig {
  int64_t every_steps = 0;  // 0 = no memory tier
  // The root of the tier's job folders; "" = kDefaultMemoryTierRoot. The
  // job's folder is <dir>/<job id>-<hash> under a coordinator, one per job
  // (MemoryCheckpointJobDir).
  std::string dir;
  int keep_last = 2;  // committed memory steps kept (the disk tier keeps its own checkpoint.keep_last)
  // Copies of each shard sent to a partner rank on another host. Not built
  // yet: a job whose ranks span hosts runs without the memory tier (said in
  // an event); on one host a copy would share the host's fate, so none is made.
  int replicas = 1;

  bool enabled() const { return every_steps > 0; }
  // Messages start with "checkpoint.memory.<key>".
  Status Validate() const;
};

// Maps checkpoint.memory: inside the checkpoint: section (absent: the defaults).
Status MapMemoryTierSection(YamlMap& checkpoint, MemoryTierConfig* memory);

}  // namespace shard
