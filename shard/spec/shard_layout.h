// How ranks share a unit: the sharding strategy, the shard/replica group
// shape it implies, and how one unit's flat buffer is cut into equal per-rank shards: pure arithmetic.
//
// The unit's numel elements are padded up to a multiple of (shards * align) so
// every shard has the same size and starts 16-byte aligned; shard r owns
// [r * shard_numel, (r+1) * shard_numel) of the padded buffer. The padding is
// always zero and never leaves the process (HF export and checkpoints use the
// unpadded range, which does not depend on the number of shards).
#pragma once

#include <cstdint>
#include <string>

#include "shard/common/status.h"
#include "shard/spec/enum_names.h"

namespace shard {

// parallel.strategy (DESIGN.md "FSDP units"): ranks form S-sized shard groups
// replicated R times (world = S * R).
enum class ShardStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };
inline constexpr EnumName<ShardStrategy> kShardStrategyNames[] = {{ShardStrategy::kFullShard, "full_shard"},
                                                                  {ShardStrategy::kShardGradOp, "shard_grad_op"},
                                                                  {ShardStrategy::kNoShard, "no_shard"},
                                                                  {ShardStrategy::kHybridShard, "hybrid_shard"}};
inline const char* StrategyName(ShardStrategy s) { return EnumToName(kShardStrategyNames, s); }

// Shard/replicate group sizes for a strategy (hybrid: shard_group_size, 0 = world).
struct GroupShape {
  int shard_size = 1;
  int replicas = 1;
};
StatusOr<GroupShape> GroupShapeFor(ShardStrategy s, int world, int shard_group_size);

struct ShardLayout {
  int64_t numel = 0;        // real elements of the unit
  int64_t padded = 0;       // shards * shard_numel >= numel
  int64_t shard_numel = 0;  // elements per shard
  int shards = 1;

  int64_t begin(int r) const { return r * shard_numel; }
  int64_t end(int r) const { return (r + 1) * shard_numel; }
  // Real (unpadded) elements that shard r holds.
  int64_t real_in(int r) const;
};

// align_elems: shard sizes are multiples of this (4 floats = 16 bytes).
// Refuses shards < 1, align < 1 and negative sizes.
StatusOr<ShardLayout> ComputeShardLayout(int64_t numel, int shards, int64_t align_elems = 4);

}  // namespace shard
