// The planner's model of FsdpRuntime's transient buffers over one Llama
// micro-batch: which units are gathered (held, prefetched, kept under
// shard_grad_op) and which gradients exist at each moment, and the worst
// moment's bytes. Internal to shard/plan (memory_model.cc); pure.
#pragma once

#include <cstdint>
#include <vector>

#include "shard/common/status.h"
#include "shard/plan/memory_model.h"
#include "shard/spec/shard_layout.h"

namespace shard::plan {

inline ShardLayout Layout(int64_t numel, int shards) {
  auto l = ComputeShardLayout(numel, shards < 1 ? 1 : shards);
  SHARD_CHECK(l.ok());
  return *l;
}

// Per-unit byte weights for the gather simulation.
struct UnitBytes {
  std::vector<int64_t> gathered;     // a gathered copy of the unit
  std::vector<int64_t> grad;         // its unsharded gradient while the model computes it
  std::vector<int64_t> grad_shard;   // its reduce-scatter landing shard
  // gradient + landing shard while being reduce-scattered (empty: grad + grad_shard)
  std::vector<int64_t> grad_in_flight;
  // a copy made beside the full gradient when it is done (GradsDone casting
  // an fp32 gradient to a two-byte reduce_dtype); empty: none
  std::vector<int64_t> cast;
};

GatherPeak SimulateGathers(const UnitBytes& b, int num_layers, bool tied, int prefetch, bool keep_forward);

// Element counts (gathered, gradient, landing shard) per unit: multiply by
// the bytes per element.
UnitBytes ElementWeights(const std::vector<int64_t>& numels, int shards, bool grads);

}  // namespace shard::plan
