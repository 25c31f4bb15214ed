// What a job's checkpoints cost on disk: the bytes of one committed step (every
// unit's fp32 parameters and AdamW m, v — the optimizer state as it is held —
// once across the shard files; LoRA: the adapters), times checkpoint.keep_last
// kept, and the time one save takes when each node writes its writer ranks'
// shards at the cluster's disk bandwidth (clusters.yaml host.disk_write_gbs;
// unknown when the catalog has none). Writes overlap training only with
// checkpoint.async; a synchronous save stalls the step for save_s.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "shard/plan/hardware.h"
#include "shard/plan/workload.h"

namespace shard::plan {

struct CheckpointCost {
  int64_t bytes_per_checkpoint = 0;  // all shard files of one step
  int keep_last = 0;
  int64_t disk_bytes = 0;            // bytes_per_checkpoint x keep_last
  int64_t bytes_per_node = 0;        // what one node writes per save
  double disk_write_gbs = 0;         // per node, from the catalog (0 = unknown)
  double save_s = 0;                 // per save (0 when the bandwidth is unknown)
};

CheckpointCost EstimateCheckpoint(const Workload& w, const ClusterSpec& cluster);

}  // namespace shard::plan
