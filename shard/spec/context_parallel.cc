#include "shard/spec/context_parallel.h"

#include <string>

namespace shard {

Status CheckContextParallel(int context_parallel, int64_t seq_len, int world_size) {
  const std::string what = "parallel.context_parallel " + std::to_string(context_parallel);
  if (context_parallel < 1) return InvalidArgument(what + ": must be at least 1");
  if (context_parallel == 1) return OkStatus();
  if (seq_len % (2LL * context_parallel) != 0)
    return InvalidArgument(what + ": seq_len " + std::to_string(seq_len) + " is not a multiple of 2 x " +
                           std::to_string(context_parallel) + " = " + std::to_string(2 * context_parallel) +
                           " (each sequence is cut into 2C equal chunks)");
  if (world_size % context_parallel != 0)
    return InvalidArgument(what + ": does not divide parallel.world_size " + std::to_string(world_size));
  return OkStatus();
}

std::array<CpChunk, 2> HeadTailChunks(int64_t seq, int c, int r) {
  const int64_t len = seq / (2LL * c);
  return {CpChunk{r * len, len}, CpChunk{(2LL * c - 1 - r) * len, len}};
}

}  // namespace shard
