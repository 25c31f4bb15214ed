#include "shard/model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace shard {

Status ValidateSampling(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    return InvalidArgument("--temperature must be a finite number >= 0 (0 = greedy), got " + std::to_string(o.temperature));
  if (o.top_k < 0) return InvalidArgument("--top-k must be >= 0 (0 = no limit), got " + std::to_string(o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1)) return InvalidArgument("--top-p must be in (0, 1], got " + std::to_string(o.top_p));
  return OkStatus();
}

int32_t SampleToken(std::span<const float> logits, const SamplingOptions& o, std::mt19937_64& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  const int32_t argmax = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (o.temperature == 0 || o.top_k == 1) return argmax;
  // Candidates by descending logit (ties by id, so the order is deterministic).
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
  ids.resize(k);
  std::vector<double> p(k);
  const double mx = logits[ids[0]];
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += (p[i] = std::exp((logits[ids[i]] - mx) / o.temperature));
  // Nucleus: the smallest prefix whose probability reaches top_p (at least one).
  int64_t keep = k;
  if (o.top_p < 1) {
    double acc = 0;
    for (int64_t i = 0; i < k; ++i) {
      acc += p[i] / sum;
      if (acc >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += p[i];
  double u = std::uniform_real_distribution<double>(0.0, kept)(rng);
  for (int64_t i = 0; i < keep; ++i) {
    if (u < p[i]) return ids[i];
    u -= p[i];
  }
  return ids[keep - 1];
}

}  // namespace shard
