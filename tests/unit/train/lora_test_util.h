// Helpers shared by the LoRA and QLoRA trainer tests: a trainer's adapters
// per layer, and the largest difference between two such sets.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "shard/train/trainer.h"

namespace shard::lora_testing {

// Every layer's adapter parameters (LoraAdapters::ReadLayer), in layer order.
inline std::vector<std::vector<float>> AdapterLayers(Trainer& tr) {
  const LoraLayout& ll = tr.lora()->layout();
  std::vector<std::vector<float>> out(ll.num_layers, std::vector<float>(ll.layer_numel));
  for (int l = 0; l < ll.num_layers; ++l) tr.lora()->ReadLayer(l, out[l].data());
  return out;
}

// max |a - b| over the largest |a| (same shapes).
inline double MaxRelDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t l = 0; l < a.size(); ++l)
    for (size_t i = 0; i < a[l].size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[l][i]) - b[l][i]));
      scale = std::max(scale, std::fabs(static_cast<double>(a[l][i])));
    }
  return diff / scale;
}

}  // namespace shard::lora_testing
