// The job file's health: section — what the coordinator watches in a running
// attempt beyond the restart: section's deadlines.
//
//   health: {straggler_ratio: 1.5, straggler_window: 20, straggler_action: none}
//
// A rank whose mean compute per step (its step time minus its time waiting in
// collectives) over the last straggler_window steps exceeds the median of the
// other ranks' by more than straggler_ratio is named as a straggler: one
// event when it becomes one and one when it recovers, a flag in shardctl
// status and /metrics (docs/control-plane.md, "Stragglers"). With
// straggler_action: restart, a rank named a straggler also restarts the
// attempt (a fresh process often cures a sick one); the restart counts
// against restart.max_restarts like any other.
#pragma once

#include "shard/common/status.h"
#include "shard/spec/enum_names.h"

namespace shard {

// health.straggler_action: what naming a straggler does besides the event.
enum class StragglerAction { kNone, kRestart };
inline constexpr EnumName<StragglerAction> kStragglerActionNames[] = {{StragglerAction::kNone, "none"},
                                                                      {StragglerAction::kRestart, "restart"}};
inline const char* StragglerActionName(StragglerAction a) { return EnumToName(kStragglerActionNames, a); }

class YamlMap;

struct HealthConfig {
  double straggler_ratio = 1.5;  // > 1: a rank this many times the others' median compute is a straggler
  int straggler_window = 20;     // steps each comparison averages over
  StragglerAction straggler_action = StragglerAction::kNone;  // restart: a new straggler restarts the attempt
  // Messages start with "health.<key>" (the caller adds the file).
  Status Validate() const;
};

// Maps the job file's health: section (absent: the defaults).
Status MapHealthSection(YamlMap& root, HealthConfig* health);

}  // namespace shard
