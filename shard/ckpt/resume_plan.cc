// The resume plan made without a coordinator, and a rank's tiers from a plan
// (resume_plan.h).
#include "shard/ckpt/resume_plan.h"

#include <filesystem>

#include "shard/ckpt/catalog.h"

namespace shard {

ResumePlan StandalonePlan(const JobConfig& job) {
  ResumePlan plan;
  plan.resume_from = job.checkpoint.resume;
  plan.memory_dir = job.checkpoint.memory.enabled() ? MemoryCheckpointJobDir(job) : std::string();
  const std::filesystem::path from(plan.resume_from);
  plan.step = StepOfDirName(from.filename().string()).value_or(0);
  if (!plan.memory_dir.empty() && from.parent_path() == std::filesystem::path(plan.memory_dir))
    plan.tier = CheckpointTier::kMemory;
  return plan;
}

CheckpointTiers TiersFromPlan(const ResumePlan& plan, const std::string& host_dir, const std::string& assembled) {
  CheckpointTiers tiers;
  tiers.resume = assembled.empty() ? plan.resume_from : assembled;
  tiers.memory = !plan.memory_dir.empty();
  tiers.memory_dir = host_dir.empty() ? plan.memory_dir : host_dir;
  tiers.memory_per_host = !host_dir.empty();
  return tiers;
}

}  // namespace shard
