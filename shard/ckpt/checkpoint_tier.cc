#include "shard/ckpt/checkpoint_tier.h"

#include <filesystem>

#include "shard/common/file_util.h"

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

Status DropMemoryStepsBefore(const std::string& memory_dir, int64_t floor, const std::string& run_fingerprint) {
  ASSIGN_OR_RETURN(std::vector<StepInfo> steps, ListSteps(memory_dir));
  for (const StepInfo& s : steps) {
    if (s.step >= floor) continue;
    if (s.committed) {
      auto text = ReadFileToString(s.dir + "/" + kCommittedFile);
      auto m = text.ok() ? Manifest::FromJson(*text, s.dir) : StatusOr<Manifest>(text.status());
      if (m.ok() && m->run_fingerprint != run_fingerprint) continue;  // another run's
    }
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(s.dir, ec))) {
      fs::remove(s.dir, ec);
    } else {
      fs::remove(fs::path(s.dir) / kCommittedFile, ec);  // uncommitted first, as retention does
      ec.clear();
      fs::remove_all(s.dir, ec);
    }
    if (ec) return DataLoss("memory tier: cannot delete " + s.dir + ": " + ec.message());
  }
  return OkStatus();
}

Status RemoveMemoryTier(const std::string& memory_dir) {
  if (memory_dir.empty()) return OkStatus();
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(memory_dir, ec);
  if (st.type() == fs::file_type::not_found) return OkStatus();
  if (fs::is_symlink(st)) {
    fs::remove(memory_dir, ec);
  } else {
    fs::remove_all(memory_dir, ec);
  }
  if (ec) return DataLoss("memory tier: cannot remove " + memory_dir + ": " + ec.message());
  return OkStatus();
}

}  // namespace shard
