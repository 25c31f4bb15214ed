#include "coordinator/checkpoints/checkpoint_committer.h"

#include <filesystem>

#include "shard/ckpt/committer.h"
#include "shard/ckpt/shard_file.h"
#include "shard/common/file_util.h"

namespace fs = std::filesystem;

namespace shardd {

shard::StatusOr<std::optional<shard::Manifest>> CheckpointCommitter::Add(const ShardReport& r) {
  const auto key = std::make_pair(r.tier, r.step);
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    ASSIGN_OR_RETURN(shard::Manifest base,
                     shard::Manifest::FromJson(r.manifest_base, "checkpoint report of rank " + std::to_string(r.rank),
                                               /*allow_partial=*/true));
    if (base.step != r.step)
      return shard::InvalidArgument("checkpoint report of rank " + std::to_string(r.rank) + ": step " +
                                    std::to_string(r.step) + " but its manifest says " + std::to_string(base.step));
    if (base.shard_count < 1) return shard::InvalidArgument("checkpoint report: shard_count must be >= 1");
    it = pending_.emplace(key, Pending{r.step_dir, std::move(base), r.tier, {}}).first;
  }
  Pending& p = it->second;
  // Per-host folders: each host's step folder has its own path; the step's
  // name is what the reports share.
  if (r.remote ? fs::path(r.step_dir).filename() != fs::path(p.step_dir).filename() : r.step_dir != p.step_dir)
    return shard::InvalidArgument("checkpoint report of rank " + std::to_string(r.rank) + " names step dir " +
                                  r.step_dir + ", others " + p.step_dir);
  for (const shard::ManifestFile& f : r.files) {
    if (f.shard_rank < 0 || f.shard_rank >= p.base.shard_count ||
        f.name != shard::ShardFileName(f.shard_rank, p.base.shard_count))
      return shard::InvalidArgument("checkpoint report of rank " + std::to_string(r.rank) + ": unexpected file " +
                                    f.name + " (shard " + std::to_string(f.shard_rank) + " of " +
                                    std::to_string(p.base.shard_count) + ")");
    if (r.remote && r.partner_required) {
      const size_t i = static_cast<size_t>(&f - r.files.data());
      if (i >= r.partner_ranks.size() || r.partner_ranks[i] < 0) {
        pending_.erase(it);
        return shard::FailedPrecondition(
            "memory step " + std::to_string(r.step) + ": rank " + std::to_string(r.rank) + "'s " + f.name +
            " has no partner copy on another host (checkpoint.memory.replicas: 1); the step is not committed");
      }
    }
    p.shards[f.shard_rank] = f;
  }
  if (static_cast<int>(p.shards.size()) < p.base.shard_count) return std::optional<shard::Manifest>();

  shard::Manifest m = p.base;
  m.files.clear();
  if (r.remote) {
    // The reports are the proof: the coordinator cannot see those folders.
    for (auto& [sr, f] : p.shards) m.files.push_back(f);
    pending_.erase(it);
    for (auto old = pending_.begin(); old != pending_.end();)
      old = old->first.first == r.tier && old->first.second < m.step ? pending_.erase(old) : std::next(old);
    return std::optional<shard::Manifest>(std::move(m));
  }
  // Complete: trust the disk, not only the reports.
  for (auto& [sr, f] : p.shards) {
    std::error_code ec;
    const fs::path path = fs::path(p.step_dir) / f.name;
    uint64_t size = fs::file_size(path, ec);
    if (ec || size != f.size) {
      pending_.erase(it);
      return shard::DataLoss("checkpoint step " + std::to_string(r.step) + ": " + path.string() +
                             (ec ? " is missing (" + ec.message() + ")"
                                 : " has " + std::to_string(size) + " bytes, reported " + std::to_string(f.size)));
    }
    m.files.push_back(f);
  }
  const std::string step_dir = p.step_dir;
  pending_.erase(it);
  RETURN_IF_ERROR(shard::WriteFileAtomic(step_dir + "/" + shard::kCommittedFile, m.ToJson()));
  // Older partial steps of this tier can never complete now (each tier's
  // writers go in step order); the other tier's may (a disk save in flight).
  for (auto old = pending_.begin(); old != pending_.end();)
    old = old->first.first == r.tier && old->first.second < m.step ? pending_.erase(old) : std::next(old);
  return std::optional<shard::Manifest>(std::move(m));
}

shard::Status CheckpointCommitter::Retain(const std::string& step_dir, int keep_last,
                                          const std::string& run_fingerprint) {
  return shard::ApplyRetention(fs::path(step_dir).parent_path().string(), keep_last, run_fingerprint);
}

}  // namespace shardd
