#include "shard/fsdp/shard_layout.h"

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

}  // namespace shard
