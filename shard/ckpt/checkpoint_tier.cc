#include "shard/ckpt/checkpoint_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shard/ckpt/committer.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"
#include "shard/common/owned_dir.h"

namespace shard {
namespace fs = std::filesystem;

const char* CheckpointTierName(CheckpointTier tier) { return tier == CheckpointTier::kMemory ? "memory" : "disk"; }

bool ParseCheckpointTier(const std::string& name, CheckpointTier* tier) {
  if (name == "disk" || name.empty()) {
    *tier = CheckpointTier::kDisk;
    return true;
  }
  if (name == "memory") {
    *tier = CheckpointTier::kMemory;
    return true;
  }
  return false;
}

std::string SkippedStepLine(int64_t step, CheckpointTier tier, const std::string& why) {
  return "skipping step " + std::to_string(step) + " (" + CheckpointTierName(tier) + "): " + why;
}

StatusOr<TieredStep> FindLatestGoodTieredStep(const std::string& disk_dir, const std::string& memory_dir,
                                              bool verify, const StepFilter& accept,
                                              std::vector<std::string>* skipped) {
  struct Candidate {
    StepInfo info;
    CheckpointTier tier;
  };
  std::vector<Candidate> all;
  Status disk_listed = OkStatus();
  for (CheckpointTier tier : {CheckpointTier::kDisk, CheckpointTier::kMemory}) {
    const std::string& dir = tier == CheckpointTier::kDisk ? disk_dir : memory_dir;
    if (dir.empty()) continue;
    auto steps = ListSteps(dir);
    if (!steps.ok()) {
      if (tier == CheckpointTier::kDisk) disk_listed = steps.status();
      continue;  // a memory tier that is gone (a reboot) holds nothing
    }
    for (StepInfo& s : *steps)
      if (s.committed) all.push_back({std::move(s), tier});
  }
  // Newest first; of one number, the memory step first (cheap on tmpfs).
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.info.step != b.info.step ? a.info.step > b.info.step : a.tier > b.tier;
  });
  int other_run = 0;
  std::string newest_problem;
  for (const Candidate& c : all) {
    if (accept) {
      // The manifest alone decides whose step it is; a manifest that does not
      // parse is left to Open below, which names the damage.
      auto text = ReadFileToString(c.info.dir + "/" + kCommittedFile);
      auto m = text.ok() ? Manifest::FromJson(*text, c.info.dir) : StatusOr<Manifest>(text.status());
      if (m.ok() && !accept(*m)) {
        ++other_run;
        continue;
      }
    }
    auto r = CheckpointReader::Open(c.info.dir, verify);
    if (r.ok()) return TieredStep{c.info.dir, r->manifest().step, c.tier};
    LOG_WARN("skipping checkpoint {}: {}", c.info.dir, r.status().message());
    if (newest_problem.empty()) newest_problem = r.status().message();
    if (skipped) skipped->push_back(SkippedStepLine(c.info.step, c.tier, r.status().message()));
  }
  if (!disk_listed.ok() && all.empty()) return disk_listed;
  const std::string others =
      other_run > 0 ? " (" + std::to_string(other_run) + " committed step(s) of another run were not considered)" : "";
  const size_t rejected = all.size() - static_cast<size_t>(other_run);
  if (rejected == 0) return NotFound("no committed checkpoint in " + disk_dir + others);
  return NotFound("no usable committed checkpoint in " + disk_dir +
                  (memory_dir.empty() ? std::string() : " or " + memory_dir) + ": all " + std::to_string(rejected) +
                  " committed steps are damaged; the newest: " + newest_problem + others);
}

Status DeleteStepAt(int dir_fd, const std::string& name, const std::string& path) {
  const int step = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (step >= 0) {
    const bool uncommitted = ::unlinkat(step, kCommittedFile, 0) == 0 || errno == ENOENT;
    const int err = errno;
    ::close(step);
    if (!uncommitted)
      return DataLoss("cannot uncommit " + path + "/" + kCommittedFile + ": " + std::strerror(err));
  }
  return RemoveEntryAt(dir_fd, name, path);
}

StatusOr<OwnedDir> OpenMemoryTierDir(const std::string& memory_dir, int depth, bool create) {
  fs::path root = fs::path(memory_dir).lexically_normal();
  if (root.has_filename() == false) root = root.parent_path();  // a trailing '/'
  fs::path rel;
  for (int i = 0; i < depth && root.has_parent_path() && root != root.root_path(); ++i) {
    rel = rel.empty() ? root.filename() : root.filename() / rel;
    root = root.parent_path();
  }
  return OwnedDir::Open(root.string(), rel.string(), create);
}

Status ApplyMemoryRetention(const std::string& memory_dir, int keep_last, const std::string& run_fingerprint) {
  auto dir = OwnedDir::OpenUnderParent(memory_dir, /*create=*/false);
  if (!dir.ok() && dir.status().code() == StatusCode::kNotFound) return OkStatus();
  if (!dir.ok()) return dir.status().WithContext("memory tier retention: nothing deleted");
  return ApplyRetention(memory_dir, keep_last, run_fingerprint, dir->fd());
}

Status DropMemoryStepsBefore(const std::string& memory_dir, int64_t floor, const std::string& run_fingerprint) {
  auto dir = OwnedDir::OpenUnderParent(memory_dir, /*create=*/false);
  if (!dir.ok() && dir.status().code() == StatusCode::kNotFound) return OkStatus();
  if (!dir.ok()) return dir.status().WithContext("memory tier: no step deleted");
  ASSIGN_OR_RETURN(std::vector<StepInfo> steps, ListSteps(memory_dir));
  for (const StepInfo& s : steps) {
    if (s.step >= floor) continue;
    if (s.committed) {
      auto text = ReadFileToString(s.dir + "/" + kCommittedFile);
      auto m = text.ok() ? Manifest::FromJson(*text, s.dir) : StatusOr<Manifest>(text.status());
      if (m.ok() && m->run_fingerprint != run_fingerprint) continue;  // another run's
    }
    RETURN_IF_ERROR(DeleteStepAt(dir->fd(), fs::path(s.dir).filename().string(), s.dir)
                        .WithContext("memory tier"));
  }
  return OkStatus();
}

Status RemoveMemoryTier(const std::string& memory_dir) {
  if (memory_dir.empty()) return OkStatus();
  std::string p = memory_dir;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos || slash == 0)
    return InvalidArgument("memory tier folder " + memory_dir + ": not <root>/<folder>");
  auto root = OwnedDir::Open(p.substr(0, slash), "", /*create=*/false);
  if (!root.ok() && root.status().code() == StatusCode::kNotFound) return OkStatus();
  if (!root.ok()) return root.status().WithContext("memory tier: " + memory_dir + " not removed");
  return root->Remove(p.substr(slash + 1)).WithContext("memory tier");
}

}  // namespace shard
