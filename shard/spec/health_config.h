// The job file's health: section — what the coordinator watches in a running
// attempt beyond the restart: section's deadlines.
//
//   health: {straggler_ratio: 1.5, straggler_window: 20}
//
// A rank whose mean compute per step (its step time minus its time waiting in
// collectives) over the last straggler_window steps exceeds the median of the
// other ranks' by more than straggler_ratio is named as a straggler: one
// event when it becomes one and one when it recovers, a flag in shardctl
// status and /metrics (docs/control-plane.md, "Stragglers").
#pragma once

#include "shard/common/status.h"

namespace shard {

class YamlMap;

struct HealthConfig {
  double straggler_ratio = 1.5;  // > 1: a rank this many times the others' median compute is a straggler
  int straggler_window = 20;     // steps each comparison averages over
  // Messages start with "health.<key>" (the caller adds the file).
  Status Validate() const;
};

// Maps the job file's health: section (absent: the defaults).
Status MapHealthSection(YamlMap& root, HealthConfig* health);

}  // namespace shard
