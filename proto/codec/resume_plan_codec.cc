// The resume plan on the wire (resume_plan_codec.h).
#include "proto/codec/resume_plan_codec.h"

namespace shardd {

v1::ResumePlan ToResumePlanProto(const shard::ResumePlan& plan) {
  v1::ResumePlan p;
  p.set_tier(ToCheckpointTierProto(plan.tier));
  p.set_step(plan.step);
  p.set_resume_from(plan.resume_from);
  p.set_this_run_only(plan.this_run_only);
  p.set_memory_dir(plan.memory_dir);
  p.set_memory_per_host(plan.memory_per_host);
  p.set_memory_manifest(plan.memory_manifest);
  for (const std::string& m : plan.memory_fallbacks) p.add_memory_fallbacks(m);
  for (const std::string& d : plan.ended_memory_dirs) p.add_ended_memory_dirs(d);
  return p;
}

v1::CheckpointTierKind ToCheckpointTierProto(shard::CheckpointTier tier) {
  return tier == shard::CheckpointTier::kMemory ? v1::CHECKPOINT_TIER_MEMORY : v1::CHECKPOINT_TIER_DISK;
}

shard::StatusOr<shard::CheckpointTier> FromCheckpointTierProto(int value, const std::string& what) {
  switch (value) {
    case v1::CHECKPOINT_TIER_DISK: return shard::CheckpointTier::kDisk;
    case v1::CHECKPOINT_TIER_MEMORY: return shard::CheckpointTier::kMemory;
    default:
      return shard::InvalidArgument(what + ": checkpoint tier " + std::to_string(value) +
                                    " is neither disk (0) nor memory (1); use matching shardd, shardd-worker and "
                                    "shardctl binaries");
  }
}

shard::StatusOr<shard::ResumePlan> FromResumePlanProto(const v1::ResumePlan& p) {
  shard::ResumePlan plan;
  ASSIGN_OR_RETURN(plan.tier, FromCheckpointTierProto(p.tier(), "the coordinator's resume plan"));
  plan.step = p.step();
  plan.resume_from = p.resume_from();
  plan.this_run_only = p.this_run_only();
  plan.memory_dir = p.memory_dir();
  plan.memory_per_host = p.memory_per_host();
  plan.memory_manifest = p.memory_manifest();
  plan.memory_fallbacks.assign(p.memory_fallbacks().begin(), p.memory_fallbacks().end());
  plan.ended_memory_dirs.assign(p.ended_memory_dirs().begin(), p.ended_memory_dirs().end());
  return plan;
}

}  // namespace shardd
