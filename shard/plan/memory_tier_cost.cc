#include "shard/plan/memory_tier_cost.h"

#include "shard/plan/memory_model.h"

namespace shard::plan {

MemoryTierCost EstimateMemoryTier(int keep_last, int replicas, int64_t shard_numel, int64_t state_bytes,
                                  int writers_per_node, int nodes) {
  MemoryTierCost c;
  if (keep_last <= 0 || shard_numel <= 0 || writers_per_node <= 0) return c;
  c.bytes_per_step = shard_numel * state_bytes;
  c.steps = keep_last + 1;
  c.copies = replicas > 0 && nodes > 1 ? 2 : 1;
  c.writers_per_node = writers_per_node;
  c.bytes_per_node = c.bytes_per_step * c.steps * c.copies * writers_per_node;
  c.how = std::to_string(writers_per_node) + " writer ranks x " + std::to_string(c.steps) +
          " steps (checkpoint.memory.keep_last + 1) x " + FormatBytes(c.bytes_per_step) +
          (c.copies > 1 ? " x 2 (partner copies)" : "");
  return c;
}

}  // namespace shard::plan
