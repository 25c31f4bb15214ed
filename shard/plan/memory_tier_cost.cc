#include "shard/plan/memory_tier_cost.h"

#include <sys/statvfs.h>

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

void JudgeMemoryTierSpace(int64_t tier_bytes, const std::string& how, const std::string& root, int64_t free_bytes,
                          std::vector<std::string>* reasons, std::vector<std::string>* notes) {
  if (tier_bytes <= 0 || free_bytes < 0) return;
  const std::string what = "the memory checkpoint tier needs " + FormatBytes(tier_bytes) + " (" + how + ") in " +
                           root + ", which has " + FormatBytes(free_bytes) + " free";
  if (tier_bytes > free_bytes)
    reasons->push_back(what + ": lower checkpoint.memory.keep_last, or choose a larger checkpoint.memory.dir");
  else if (static_cast<double>(tier_bytes) > 0.8 * static_cast<double>(free_bytes))
    notes->push_back(what + " (above 80%: a full tmpfs skips memory steps, the disk tier goes on)");
}

int64_t FreeBytesAt(const std::string& path) {
  std::string p = path;
  while (!p.empty()) {
    struct statvfs sv;
    if (::statvfs(p.c_str(), &sv) == 0) return static_cast<int64_t>(sv.f_bavail) * static_cast<int64_t>(sv.f_frsize);
    if (p == "/") break;
    const size_t slash = p.rfind('/');
    p = slash == std::string::npos || slash == 0 ? "/" : p.substr(0, slash);
  }
  return -1;
}

}  // namespace shard::plan
