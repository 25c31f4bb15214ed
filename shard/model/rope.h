// Rotary position embedding frequencies (HF conventions), as pure functions.
#pragma once

#include <vector>

#include "shard/spec/llama_config.h"

namespace shard {

// inv_freq[i] = theta^(-2i/head_dim) for i < head_dim/2, with HF's "llama3"
// scaling applied when configured (long wavelengths divided by factor, a smooth
// blend between low_freq_factor and high_freq_factor).
std::vector<double> RopeInvFreq(const LlamaConfig& config);

// Host table [max_pos, head_dim]: cos(p * inv_freq[i]) in columns [0, hd/2),
// sin in [hd/2, hd) — the layout Backend::Rope reads. Angles in double.
std::vector<float> RopeCosSinTable(const LlamaConfig& config, int64_t max_pos);

}  // namespace shard
