// The one mapping between an attempt's resume plan (shard::ResumePlan, what
// the coordinator decides and the worker builds its checkpoint tiers from)
// and its wire form (v1::ResumePlan in RegisterResponse).
#pragma once

#include <string>

#include "shard/ckpt/checkpoint_tier.h"
#include "shard/ckpt/resume_plan.h"
#include "shard/common/status.h"
#include "shardd/v1/worker.pb.h"

namespace shardd {

v1::ResumePlan ToResumePlanProto(const shard::ResumePlan& plan);
// INVALID_ARGUMENT (one line) for a tier this build does not know.
shard::StatusOr<shard::ResumePlan> FromResumePlanProto(const v1::ResumePlan& plan);

// The checkpoint tier on the wire (CheckpointTierKind): the one mapping. An
// unknown value (a newer peer, a corrupt message) is INVALID_ARGUMENT in one
// line that starts with `what` ("checkpoint report of rank 2").
v1::CheckpointTierKind ToCheckpointTierProto(shard::CheckpointTier tier);
shard::StatusOr<shard::CheckpointTier> FromCheckpointTierProto(int value, const std::string& what);

}  // namespace shardd
