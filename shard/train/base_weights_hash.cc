#include "shard/train/base_weights_hash.h"

#include <cstring>

namespace shard {
namespace {

// splitmix64's finaliser: every input bit moves every output bit.
inline uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t WeightsSliceHash(int unit, int64_t first, const float* v, int64_t n) {
  // A model has far fewer than 2^24 units and 2^40 elements per unit.
  const uint64_t key0 = (static_cast<uint64_t>(unit) << 40) + static_cast<uint64_t>(first);
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof(bits));
    sum += Mix(Mix(key0 + static_cast<uint64_t>(i)) ^ bits);
  }
  return sum;
}

std::array<double, 4> HashToLimbs(uint64_t h) {
  std::array<double, 4> l;
  for (int k = 0; k < 4; ++k) l[k] = static_cast<double>((h >> (16 * k)) & 0xffff);
  return l;
}

uint64_t FoldHashLimbs(const std::array<double, 4>& limb_sums) {
  uint64_t h = 0;  // wraps mod 2^64, as the sum it reassembles
  for (int k = 0; k < 4; ++k) h += static_cast<uint64_t>(limb_sums[k]) << (16 * k);
  return h;
}

}  // namespace shard
