#include "shard/ckpt/resume_choice.h"

#include "shard/ckpt/catalog.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"

#include <filesystem>

namespace shard {
namespace fs = std::filesystem;
namespace {

StatusOr<Manifest> ReadManifest(const std::string& step_dir) {
  const std::string path = step_dir + "/" + kCommittedFile;
  auto text = ReadFileToString(path);
  if (!text.ok()) return NotFound(step_dir + " is not a committed checkpoint (no " + kCommittedFile + ")");
  return Manifest::FromJson(*text, path);
}

// The note for resuming `m` (at step_dir) in a run whose keys are `mine`.
std::string OwnershipNote(const Manifest& m, const std::string& step_dir, const RunKeys& mine) {
  if (m.run_fingerprint.empty())
    return step_dir + " records no run fingerprint (an older shardd wrote it): resumed as this run's";
  if (m.run_fingerprint == RunFingerprint(mine)) return "";
  return "resuming " + step_dir + ", a step of another run, as checkpoint.resume asks (it differs in " +
         DescribeRunDifference(m.run_keys, mine) + ")";
}

}  // namespace

std::string StartingOverLine(size_t skipped, const std::string& memory_dir) {
  return "starting from step 0: the " + std::to_string(skipped) + " committed memory step(s) of this run in " +
         memory_dir + " failed their checks (above) and the disk tier holds no committed step";
}

StatusOr<ResumeChoice> VerifyHandedStep(const std::string& step_dir, const RunKeys& mine,
                                        const std::string& memory_dir, bool this_run_only) {
  ResumeChoice c;
  if (step_dir == "none" || step_dir.empty()) return c;
  auto m = ReadManifest(step_dir);
  if (!m.ok()) return m.status().WithContext("resume from " + step_dir);
  if (this_run_only && !IsThisRunsStep(m->run_fingerprint, RunFingerprint(mine)))
    return InvalidArgument("resume: " + step_dir + ", the step checkpoint.resume: auto was handed, is a step of " +
                           "another run, which differs from this job in " + DescribeRunDifference(m->run_keys, mine) +
                           "; not resumed (auto resumes only this run's steps)");
  c.step_dir = step_dir;
  c.note = OwnershipNote(*m, step_dir, mine);
  if (!memory_dir.empty() &&
      fs::path(step_dir).lexically_normal().parent_path() == fs::path(memory_dir).lexically_normal())
    c.tier = CheckpointTier::kMemory;
  return c;
}

std::string MemoryDirToResumeFrom(const std::string& memory_dir, int depth) {
  if (memory_dir.empty()) return "";
  auto own = OpenMemoryTierDir(memory_dir, depth, /*create=*/false);
  if (!own.ok() && own.status().code() != StatusCode::kNotFound) {
    LOG_WARN("the memory tier is not read for the resume: {}", own.status().message());
    return "";
  }
  return memory_dir;
}

StatusOr<ResumeChoice> ChooseResumeStep(const std::string& resume, const std::string& job_dir, const RunKeys& mine,
                                        const std::string& memory_dir) {
  ResumeChoice c;
  if (resume != "auto") return VerifyHandedStep(resume, mine, memory_dir, /*this_run_only=*/false);
  bool any_committed = false, disk_committed = false;
  for (const std::string& dir : {job_dir, memory_dir}) {
    if (dir.empty()) continue;
    ASSIGN_OR_RETURN(std::vector<StepInfo> steps, ListSteps(dir));
    for (const auto& s : steps) (dir == job_dir ? disk_committed : any_committed) |= s.committed;
  }
  any_committed |= disk_committed;
  if (!any_committed) return c;  // a fresh run
  const std::string fp = RunFingerprint(mine);
  auto mine_found = FindLatestGoodTieredStep(
      job_dir, memory_dir, /*verify_checksums=*/true,
      [&](const Manifest& m) { return IsThisRunsStep(m.run_fingerprint, fp); }, &c.events);
  if (mine_found.ok()) {
    ASSIGN_OR_RETURN(Manifest m, ReadManifest(mine_found->dir));
    c.step_dir = mine_found->dir;
    c.tier = mine_found->tier;
    c.verified = true;  // FindLatestGoodStep read every file's checksum
    c.note = OwnershipNote(m, c.step_dir, mine);
    return c;
  }
  // Only memory steps: this run's all damaged (said, never silent), or
  // another run's (a tmpfs folder left by a crash: replaced as this run
  // writes its own). The disk tier holds none: a fresh start.
  if (!disk_committed) {
    if (!c.events.empty())
      c.events.push_back(StartingOverLine(c.events.size(), memory_dir));
    return c;
  }
  // None of this run's: say whose the good ones are instead of resuming them.
  auto any = FindLatestGoodStep(job_dir, /*verify_checksums=*/false);
  if (any.ok()) {
    ASSIGN_OR_RETURN(Manifest m, ReadManifest(*any));
    return InvalidArgument("resume: " + job_dir + " holds checkpoints of another run (newest: " + *any +
                           "), which differs from this job in " + DescribeRunDifference(m.run_keys, mine) +
                           ". To start this job fresh give it a new name (or another checkpoint.dir), or set "
                           "checkpoint.resume: none (its steps then replace that run's steps of the same number); "
                           "to continue that run anyway set checkpoint.resume: " + *any);
  }
  return mine_found.status().WithContext("resume: committed checkpoints exist but none is usable");
}

}  // namespace shard
