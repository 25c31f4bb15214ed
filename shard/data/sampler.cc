#include "shard/data/sampler.h"

#include <numeric>
#include <utility>

namespace shard {
namespace {
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  uint64_t state = seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(epoch) * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = n - 1; i > 0; --i) {
    // Unbiased enough for i < 2^32 via 128-bit multiply-shift.
    uint64_t r = SplitMix64(state);
    int64_t j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(p[i], p[j]);
  }
  return p;
}

Sampler::Sampler(int64_t num_samples, bool shuffle, uint64_t seed)
    : n_(num_samples), shuffle_(shuffle), seed_(seed) {}

int64_t Sampler::At(int64_t pos) {
  int64_t epoch = pos / n_, i = pos % n_;
  if (!shuffle_) return i;
  if (epoch != epoch_) {
    perm_ = EpochPermutation(n_, seed_, epoch);
    epoch_ = epoch;
  }
  return perm_[i];
}

BatchSlice RankSlice(int64_t global_batch, int rank, int world) {
  return {global_batch * rank / world, global_batch * (rank + 1) / world};
}

}  // namespace shard
