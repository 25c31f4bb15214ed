// What one attempt resumes from and which checkpoint tiers it keeps: decided
// once, by the coordinator (coordinator/checkpoints/checkpoint_ledger.h), and
// handed to every worker of the attempt as one message
// (RegisterResponse.resume_plan, proto/codec/resume_plan_codec.h). The worker
// builds its checkpoint tiers from it; the trainer verifies the step it is
// handed (shard/ckpt/resume_choice.h), it does not choose another.
// Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/ckpt/checkpoint_tier.h"
#include "shard/ckpt/resume_choice.h"
#include "shard/common/status.h"
#include "shard/spec/job_config.h"

namespace shard {

struct ResumePlan {
  // The tier of the step this attempt resumes from: kMemory when it is a
  // per-host memory step (memory_manifest), else kDisk (a step folder of
  // either tier's local folder, or none).
  CheckpointTier tier = CheckpointTier::kDisk;
  // That step (0 = from scratch).
  int64_t step = 0;
  // The step folder this attempt resumes from, or "none" (from scratch):
  // chosen once, by ChooseResumeStep (resume_choice.h) from the job file's
  // checkpoint.resume, by the coordinator (or StandalonePlan). "auto" only
  // for a peft: job (its adapters' checkpoints are found by the LoRA
  // trainable); "" = the job file's own choice (a default plan: a library
  // user, a test). With tier kMemory, the folder every rank falls back to
  // when no host set can assemble the memory steps.
  std::string resume_from;
  // resume_from was chosen by checkpoint.resume: auto (or by a restart):
  // the trainer refuses it, with one line, unless it is a step of this run
  // or of an unknown run (a STEP_DIR the job file names may be any run's).
  bool this_run_only = false;
  // The memory tier's job folder for this attempt ("" = no memory tier: off
  // in the job file). With memory_per_host it is the root of the per-host
  // folders (<memory_dir>/host-<hostname>, shard/ckpt/partner_map.h).
  std::string memory_dir;
  bool memory_per_host = false;
  // tier kMemory: the step's manifest (Manifest JSON, every file with its
  // size and xxh64) each host assembles, then the older committed memory
  // steps (newest first) the ranks try in turn before resume_from.
  std::string memory_manifest;
  std::vector<std::string> memory_fallbacks;
  // Per host: the memory folders of ended per-host jobs under the same root;
  // each worker removes its host's part of each.
  std::vector<std::string> ended_memory_dirs;
};

// The checkpoint tiers one rank's trainer is handed (CheckpointInputs::tiers
// in shard/train/trainer.h), built from the attempt's plan: the parsed
// JobConfig stays as the job file says. A default value leaves everything
// to the job file (a library user, a test).
struct CheckpointTiers {
  // checkpoint.resume for this rank: a step folder or "none" as the plan
  // names it (the trainer verifies it, VerifyHandedStep); "auto" or "" (=
  // the job file's checkpoint.resume) only when no plan was handed: the
  // trainer then chooses with the same ChooseResumeStep.
  std::string resume;
  // The plan's this_run_only: a step of another run is refused.
  bool this_run_only = false;
  // false: no memory tier this attempt, whatever the job file says (the
  // coordinator gave it no folder).
  bool memory = true;
  // The memory tier's job folder ("" = the job's own rule,
  // MemoryCheckpointJobDir); with memory_depth 2, this host's folder of a
  // tier the coordinator cannot read (worker/memory_partner.h): its steps
  // commit on no host, so a plan names the step resumed from it.
  std::string memory_dir;
  // How deep memory_dir lies below the user-owned root the tier checks
  // (OpenMemoryTierDir): 1 for a local tier, 2 for this host's folder of a
  // per-host one. Decided here, from the plan: the trainer never looks at
  // whether the tier is per host.
  int memory_depth = 1;
};

// The plan a job file makes by itself (a worker without a coordinator,
// --standalone): the step checkpoint.resume names, chosen by the same
// ChooseResumeStep the coordinator calls (reads the checkpoint folders:
// "auto" takes the newest good step of this run, either tier), the memory
// tier (when on) in its own folder on this host. The fallbacks the choice
// made go to *events (resume_choice.h), when given. INVALID_ARGUMENT when
// "auto" finds only another run's steps.
StatusOr<ResumePlan> StandalonePlan(const JobConfig& job, std::vector<std::string>* events = nullptr);

// The plan's resume from a ChooseResumeStep choice (the coordinator's and
// StandalonePlan's): resume_from the step folder or "none", its step and
// tier; by_auto (checkpoint.resume: auto chose it): this_run_only.
void ApplyResumeChoice(const ResumeChoice& choice, bool by_auto, ResumePlan* plan);

// This rank's tiers from the attempt's plan. host_dir: this host's folder of
// a per-host memory tier when the worker keeps one ("" otherwise);
// assembled: the per-host memory step every host assembled from the plan's
// manifests ("" = none: the plan's resume_from). Pure.
CheckpointTiers TiersFromPlan(const ResumePlan& plan, const std::string& host_dir, const std::string& assembled);

}  // namespace shard
