#include "shard/model/rope.h"

#include <cmath>

namespace shard {

std::vector<double> RopeInvFreq(const LlamaConfig& c) {
  const int hd = c.head_dim();
  std::vector<double> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = 1.0 / std::pow(c.rope_theta, (2.0 * i) / hd);
  if (c.rope_scaling.type == "llama3") {
    const auto& s = c.rope_scaling;
    const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_ctx / s.low_freq_factor;
    const double high_wavelen = old_ctx / s.high_freq_factor;
    for (double& f : inv) {
      double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

std::vector<float> RopeCosSinTable(const LlamaConfig& c, int64_t max_pos) {
  const int hd = c.head_dim(), half = hd / 2;
  std::vector<double> inv = RopeInvFreq(c);
  std::vector<float> table(static_cast<size_t>(max_pos) * hd);
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int i = 0; i < half; ++i) {
      // HF computes the angle in fp32 (inv_freq fp32 times position); double
      // here is at least as accurate and identical for the small positions tested.
      double a = static_cast<double>(p) * inv[i];
      table[p * hd + i] = static_cast<float>(std::cos(a));
      table[p * hd + half + i] = static_cast<float>(std::sin(a));
    }
  }
  return table;
}

}  // namespace shard
