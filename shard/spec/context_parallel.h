// Context parallelism's layout of a sequence (parallel.context_parallel C):
// the sequence is cut into 2C chunks of seq/(2C) tokens and CP rank r keeps
// chunks r and 2C-1-r (head-tail), so that every rank does the same causal
// attention work. A rank's local rows are its head chunk, then its tail chunk;
// positions stay global. Pure.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "shard/common/status.h"

namespace shard {

struct CpChunk {
  int64_t offset = 0;  // the chunk's first position in the sequence
  int64_t len = 0;
};

// Why C does not fit a sequence length and a world size, or OK:
// "parallel.context_parallel 3: seq_len 100 is not a multiple of 2 x 3 = 6".
Status CheckContextParallel(int context_parallel, int64_t seq_len, int world_size);

// The two chunks CP rank `r` of `c` keeps: {r, 2c-1-r}, each seq/(2c) long.
std::array<CpChunk, 2> HeadTailChunks(int64_t seq, int c, int r);

// The rank-local rows of `whole` ([batch, seq, width], row-major): per
// sequence, the head chunk's rows then the tail chunk's ([batch, 2*len, width]).
template <typename T>
std::vector<T> LocalRows(const std::vector<T>& whole, int64_t batch, int64_t seq, int64_t width, int c, int r) {
  const auto chunks = HeadTailChunks(seq, c, r);
  const int64_t local = 2 * chunks[0].len;
  std::vector<T> out(static_cast<size_t>(batch * local * width));
  for (int64_t b = 0; b < batch; ++b)
    for (int i = 0; i < 2; ++i)
      for (int64_t t = 0; t < chunks[i].len; ++t)
        for (int64_t j = 0; j < width; ++j)
          out[((b * local) + i * chunks[i].len + t) * width + j] = whole[((b * seq) + chunks[i].offset + t) * width + j];
  return out;
}

}  // namespace shard
