#include "shard/spec/shard_layout.h"

#include <algorithm>

namespace shard {

int64_t ShardLayout::real_in(int r) const {
  return std::max<int64_t>(0, std::min(end(r), numel) - std::min(begin(r), numel));
}

StatusOr<ShardLayout> ComputeShardLayout(int64_t numel, int shards, int64_t align_elems) {
  if (shards < 1) return InvalidArgument("shard layout: shards must be >= 1, got " + std::to_string(shards));
  if (align_elems < 1) return InvalidArgument("shard layout: alignment must be >= 1");
  if (numel < 0) return InvalidArgument("shard layout: negative size " + std::to_string(numel));
  ShardLayout l;
  l.numel = numel;
  l.shards = shards;
  const int64_t per = (numel + shards - 1) / shards;
  l.shard_numel = std::max<int64_t>(align_elems, (per + align_elems - 1) / align_elems * align_elems);
  l.padded = l.shard_numel * shards;
  return l;
}

StatusOr<GroupShape> GroupShapeFor(ShardStrategy s, int world, int shard_group_size) {
  if (world < 1) return InvalidArgument("world size must be >= 1");
  switch (s) {
    case ShardStrategy::kFullShard:
    case ShardStrategy::kShardGradOp:
      return GroupShape{world, 1};
    case ShardStrategy::kNoShard:
      return GroupShape{1, world};
    case ShardStrategy::kHybridShard: {
      int g = shard_group_size == 0 ? world : shard_group_size;
      if (g < 1 || world % g != 0)
        return InvalidArgument("parallel.shard_group_size " + std::to_string(shard_group_size) +
                               " must divide the world size " + std::to_string(world));
      return GroupShape{g, world / g};
    }
  }
  return Internal("unreachable strategy");
}

}  // namespace shard
