#include "shard/ckpt/checkpoint_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shard/ckpt/committer.h"
#include "shard/common/file_util.h"
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

StatusOr<TieredStep> FindLatestGoodTieredStep(const std::string& disk_dir, const std::string& memory_dir,
                                              bool verify, const StepFilter& accept) {
  TieredStep mem;
  if (!memory_dir.empty()) {
    auto found = FindLatestGoodStep(memory_dir, verify, accept);
    if (found.ok()) {
      auto m = CheckpointReader::Open(*found, /*verify_checksums=*/false);
      if (m.ok()) mem = {*found, m->manifest().step, CheckpointTier::kMemory};
    }
  }
  // Only a disk step newer than the memory step can win: older ones are not
  // opened (a verify reads every byte of the step).
  auto newer = [&](const Manifest& m) { return m.step > mem.step && (!accept || accept(m)); };
  auto disk = FindLatestGoodStep(disk_dir, verify, newer);
  if (disk.ok()) {
    auto m = CheckpointReader::Open(*disk, /*verify_checksums=*/false);
    if (m.ok()) return TieredStep{*disk, m->manifest().step, CheckpointTier::kDisk};
  }
  if (!mem.dir.empty()) return mem;
  return disk.ok() ? NotFound("no usable committed checkpoint in " + disk_dir) : disk.status();
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
