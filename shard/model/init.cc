#include "shard/model/init.h"

#include <cmath>

namespace shard {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A standard normal from two counter-based uniforms (Box-Muller).
float Normal(uint64_t seed, uint64_t unit, uint64_t index) {
  uint64_t h = SplitMix64(seed ^ SplitMix64(unit * 0x100000001b3ull + 0x51ed27) ^ SplitMix64(index));
  uint64_t h2 = SplitMix64(h);
  double u1 = (static_cast<double>(h >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
  double u2 = static_cast<double>(h2 >> 11) * (1.0 / 9007199254740992.0);         // [0, 1)
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace

void InitUnitParams(const UnitSpec& unit, int unit_index, uint64_t seed, float std_dev, int64_t begin,
                    int64_t end, float* out) {
  for (int64_t i = begin; i < end; ++i) out[i - begin] = 0.0f;
  for (const auto& t : unit.tensors) {
    int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    // Norm weights start at 1, biases (qwen2's q/k/v) at 0.
    const bool is_vector = t.shape.size() == 1;
    const bool is_bias = t.hf_name.size() > 5 && t.hf_name.compare(t.hf_name.size() - 5, 5, ".bias") == 0;
    if (is_vector && is_bias) continue;  // already zero
    for (int64_t i = lo; i < hi; ++i)
      out[i - begin] = is_vector ? 1.0f : std_dev * Normal(seed, static_cast<uint64_t>(unit_index), static_cast<uint64_t>(i));
  }
}

}  // namespace shard
