// Which committed step a job resumes from (checkpoint.resume), and whether
// that step is this run's (issue 18 item 3).
//
//   none      from scratch.
//   auto      the newest good committed step of this run (same fingerprint,
//             run_fingerprint.h) or of an unknown run (a manifest written
//             before fingerprints: resumed with a warning). If the directory
//             holds only another run's steps, INVALID_ARGUMENT naming the
//             differing keys and the ways out — never a silent resume.
//             With a memory tier (memory_dir not ""), the newest such step of
//             either tier (checkpoint_tier.h): a memory step newer than every
//             disk step wins; a damaged one falls back step by step through
//             the older memory steps, then disk, each fallback in `events`.
//             If every step of this run is damaged and the disk tier has none
//             of another run's either, from scratch, saying why in `events`.
//   STEP_DIR  that step, whoever wrote it: resuming another run's step on
//             purpose is allowed (fine-tuning from a checkpoint); the note
//             says so and names the differences.
#pragma once

#include <string>
#include <vector>

#include "shard/ckpt/checkpoint_tier.h"
#include "shard/common/status.h"
#include "shard/spec/run_fingerprint.h"

namespace shard {

struct ResumeChoice {
  std::string step_dir;   // "" = from scratch
  bool verified = false;  // the step's checksums were read while choosing it
  std::string note;       // a warning to log ("" = none): an unknown or another run's step
  CheckpointTier tier = CheckpointTier::kDisk;  // where step_dir is
  // Each fallback, as the job's events say it (issue 39 item 6): "skipping
  // step 530 (memory): <why>" for every newer step of this run that did not
  // open or verify, and "starting from step 0: <why>" when committed steps of
  // this run existed but none was usable. Empty when nothing was skipped.
  std::vector<std::string> events;
};

// The one chooser: the coordinator calls it for every attempt (off its lock,
// coordinator/jobs/control_loop.cc), a standalone worker through
// StandalonePlan (resume_plan.h), and a trainer handed no plan (a library
// user, a test) itself. A trainer handed a plan only verifies the step
// (VerifyHandedStep).
// memory_dir: the memory tier's job folder ("" = no memory tier); a STEP_DIR
// inside it is a memory step.
// The event of a fresh start after `skipped` damaged memory steps.
std::string StartingOverLine(size_t skipped, const std::string& memory_dir);

StatusOr<ResumeChoice> ChooseResumeStep(const std::string& resume, const std::string& job_dir, const RunKeys& mine,
                                        const std::string& memory_dir = "");

// The check of a step an attempt is handed (ResumePlan::resume_from): "none"
// = from scratch; else a committed step (its manifest readable; its checksums
// are read as it loads: verified false), tier kMemory when it lies in
// memory_dir, the note as ChooseResumeStep says it. this_run_only (auto
// chose it): INVALID_ARGUMENT, one line, unless it is this run's step or an
// unknown run's. It never picks another step.
StatusOr<ResumeChoice> VerifyHandedStep(const std::string& step_dir, const RunKeys& mine,
                                        const std::string& memory_dir, bool this_run_only);

// memory_dir, or "" when the memory tier there is not the user's own (a link,
// another user's, writable by others: OpenMemoryTierDir, logged) and so is
// not read for a resume. depth: 1 for a local tier, 2 for a per-host one.
std::string MemoryDirToResumeFrom(const std::string& memory_dir, int depth);


}  // namespace shard
