#include "shard/ckpt/checkpoint_tier.h"

#include <algorithm>
#include <filesystem>

#include "shard/common/file_util.h"
#include "shard/common/logging.h"

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
