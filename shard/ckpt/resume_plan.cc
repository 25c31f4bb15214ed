// The resume plan made without a coordinator, and a rank's tiers from a plan
// (resume_plan.h).
#include "shard/ckpt/resume_plan.h"

#include <filesystem>

#include "shard/ckpt/catalog.h"
#include "shard/spec/run_fingerprint.h"

namespace shard {

void ApplyResumeChoice(const ResumeChoice& choice, bool by_auto, ResumePlan* plan) {
  plan->resume_from = choice.step_dir.empty() ? "none" : choice.step_dir;
  plan->step = StepOfDirName(std::filesystem::path(choice.step_dir).filename().string()).value_or(0);
  plan->tier = choice.tier;
  plan->this_run_only = by_auto && !choice.step_dir.empty();
}

StatusOr<ResumePlan> StandalonePlan(const JobConfig& job, std::vector<std::string>* events) {
  ResumePlan plan;
  plan.memory_dir = job.checkpoint.memory.enabled() ? MemoryCheckpointJobDir(job) : std::string();
  if (job.peft.enabled()) {  // the LoRA trainable finds its adapters' checkpoints
    plan.resume_from = job.checkpoint.resume;
    return plan;
  }
  const std::string& resume = job.checkpoint.resume;
  ASSIGN_OR_RETURN(ResumeChoice choice, ChooseResumeStep(resume, CheckpointJobDir(job), RunKeysOf(job),
                                                         MemoryDirToResumeFrom(plan.memory_dir, 1)));
  ApplyResumeChoice(choice, resume == "auto", &plan);
  if (events) *events = std::move(choice.events);
  return plan;
}

CheckpointTiers TiersFromPlan(const ResumePlan& plan, const std::string& host_dir, const std::string& assembled) {
  CheckpointTiers tiers;
  tiers.resume = assembled.empty() ? plan.resume_from : assembled;
  tiers.this_run_only = assembled.empty() && plan.this_run_only;  // an assembled step: this job's own commit
  tiers.memory = !plan.memory_dir.empty();
  tiers.memory_dir = host_dir.empty() ? plan.memory_dir : host_dir;
  tiers.memory_depth = host_dir.empty() ? 1 : 2;
  return tiers;
}

}  // namespace shard
