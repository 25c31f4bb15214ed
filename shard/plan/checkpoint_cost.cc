#include "shard/plan/checkpoint_cost.h"

#include <algorithm>

#include "shard/plan/memory_model.h"

namespace shard::plan {

CheckpointCost EstimateCheckpoint(const Workload& w, const ClusterSpec& cl) {
  CheckpointCost c;
  c.keep_last = std::max(0, w.checkpoint_keep_last);
  // Parameters, m and v in the optimizer state's dtype; the unpadded elements
  // of every unit are written exactly once over the shard files.
  const int64_t per_elem = 3 * static_cast<int64_t>(DTypeSize(w.optimizer_state));
  int64_t elems = 0;
  if (w.method == Method::kFull) {
    for (int64_t n : UnitNumels(w.model)) elems += n;
  } else {
    elems = LoraParams(w.model, w.lora_rank, w.lora_targets);
  }
  c.bytes_per_checkpoint = elems * per_elem;
  c.disk_bytes = c.bytes_per_checkpoint * c.keep_last;
  // Only the S ranks of replica 0 write; spread over the nodes they span.
  auto shape = GroupShapeFor(w.strategy, std::max(1, w.world), w.shard_group_size);
  const int S = shape.ok() ? shape->shard_size : std::max(1, w.world);
  const int per_node = w.cpu_engine ? S : std::max(1, std::min(S, cl.gpus_per_node));
  c.bytes_per_node = c.bytes_per_checkpoint / S * per_node;
  c.disk_write_gbs = cl.host.disk_write_gbs;
  if (c.disk_write_gbs > 0) c.save_s = static_cast<double>(c.bytes_per_node) / (c.disk_write_gbs * 1e9);
  return c;
}

}  // namespace shard::plan
