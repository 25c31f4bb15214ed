// The job file's data: section.
#pragma once

#include <string>

#include "shard/common/status.h"

namespace shard {

struct DataConfig {
  // A raw little-endian uint32 token file, cut into windows of seq_len + 1
  // tokens that start every seq_len tokens (each token is a target once).
  std::string tokens;
  int64_t seq_len = 0;
  bool shuffle = true;  // a seeded permutation per epoch (seed: train.seed)

  Status Validate() const;
};

}  // namespace shard
