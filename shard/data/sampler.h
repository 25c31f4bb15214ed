// The sample order: a global cursor over an endless sequence of epochs, each a
// seeded permutation of [0, n) (or the identity without shuffling). A position
// maps to a sample independently of how many ranks read it, so the order —
// and a resumed run — is the same for any world size.
#pragma once

#include <cstdint>
#include <vector>

namespace shard {

class Sampler {
 public:
  Sampler(int64_t num_samples, bool shuffle, uint64_t seed);
  // Sample index at global position `pos` (pos = step * global_batch + j).
  int64_t At(int64_t pos);
  int64_t num_samples() const { return n_; }

 private:
  int64_t n_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = -1;  // epoch whose permutation is cached
  std::vector<int64_t> perm_;
};

// Fisher-Yates permutation of [0, n) from a splitmix64 stream of (seed, epoch):
// the same on every platform (no std:: distribution involved).
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);

// Which slice [begin, end) of a global batch rank `rank` of `world` reads.
struct BatchSlice {
  int64_t begin = 0;
  int64_t end = 0;
};
BatchSlice RankSlice(int64_t global_batch, int rank, int world);

}  // namespace shard
