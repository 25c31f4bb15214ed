// Picking the next token from a row of logits, as transformers' generate does
// with do_sample: temperature, then top-k, then top-p (nucleus) filtering, then
// a draw from the renormalised softmax. temperature 0 is greedy (argmax).
// Pure; deterministic for a given Rng state.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "shard/common/status.h"

namespace shard {

struct SamplingOptions {
  double temperature = 0.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = no limit
  double top_p = 1.0;        // 1 = no limit
};

// INVALID_ARGUMENT naming the flag for temperature < 0 or not finite, top_k
// < 0, top_p outside (0, 1].
Status ValidateSampling(const SamplingOptions& o);

int32_t SampleToken(std::span<const float> logits, const SamplingOptions& o, std::mt19937_64& rng);

}  // namespace shard
