// Finding the first inf/NaN in a float buffer, fast enough to run over every
// weight as it is loaded: a branch-free pass over the exponent bits (which the
// compiler vectorises) per block, and an element search only in a block that
// holds one. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <cstring>

namespace shard {

// The index of the first inf or NaN in v[0, n), or -1 when all are finite.
inline int64_t FirstNonFinite(const float* v, int64_t n) {
  constexpr int64_t kBlock = 4096;
  constexpr uint32_t kExp = 0x7f800000u;  // all-ones exponent: inf or NaN
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = b + kBlock < n ? b + kBlock : n;
    uint32_t any = 0;
    for (int64_t i = b; i < e; ++i) {
      uint32_t bits;
      std::memcpy(&bits, v + i, sizeof(bits));
      any |= static_cast<uint32_t>((bits & kExp) == kExp);
    }
    if (any == 0) continue;
    for (int64_t i = b; i < e; ++i) {
      uint32_t bits;
      std::memcpy(&bits, v + i, sizeof(bits));
      if ((bits & kExp) == kExp) return i;
    }
  }
  return -1;
}

}  // namespace shard
