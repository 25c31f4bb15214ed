// What the memory checkpoint tier (checkpoint.memory) costs in host memory:
// each writer rank keeps its shard file (p, m, v as held) of keep_last memory
// steps in tmpfs, plus the one being written before retention drops the
// oldest; with checkpoint.memory.replicas on a job spanning nodes, each node
// also holds its partner's copies (twice the bytes). tmpfs pages are host RAM:
// the planner adds them to the node's host memory, so a job whose tier does
// not fit is refused like any other.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shard::plan {

struct MemoryTierCost {
  int64_t bytes_per_step = 0;  // one writer rank's shard file of one step
  int steps = 0;               // held at once: keep_last + the one being written
  int copies = 1;              // 2 with a partner copy (replicas on more than one node)
  int writers_per_node = 0;
  int64_t bytes_per_node = 0;  // 0: no memory tier
  std::string how;             // "2 writer ranks x 3 steps x 1.2 MiB"
};

// keep_last 0 = no memory tier. shard_numel: elements of one rank's shard of
// every unit; state_bytes: 3 x the size of the state as held (p, m, v).
MemoryTierCost EstimateMemoryTier(int keep_last, int replicas, int64_t shard_numel, int64_t state_bytes,
                                  int writers_per_node, int nodes);

// The tier's bytes per node against the free space of the folder they go to
// (tmpfs has a size of its own, often half the RAM, apart from the host
// memory counted above): more than `free_bytes` is a reason (the plan does
// not fit), more than 80% of it a note. free_bytes < 0 (unknown): nothing.
// Pure; `root` and `how` only name things in the lines.
void JudgeMemoryTierSpace(int64_t tier_bytes, const std::string& how, const std::string& root, int64_t free_bytes,
                          std::vector<std::string>* reasons, std::vector<std::string>* notes);

// The bytes this user may still write in `path`'s file system (statvfs of
// `path`, or of its nearest existing ancestor when it is not made yet); -1
// when that cannot be read.
int64_t FreeBytesAt(const std::string& path);

}  // namespace shard::plan
