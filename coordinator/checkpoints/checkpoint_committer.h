// The coordinator's half of the checkpoint commit protocol: every writer rank
// reports its shard file (name, size, xxh64) for a step; when the last shard of
// the step arrives the committer checks the files on disk against the reports,
// writes COMMITTED atomically, and applies retention. Reports are per attempt:
// a new attempt starts with an empty table, so a dead attempt's half-reported
// step never commits. The two tiers (checkpoint_tier.h) commit alike and
// apart: a memory step completing never drops a disk step still in flight.
// A memory step of a job whose ranks span hosts (per-host tmpfs folders the
// coordinator cannot read) commits from the reports alone: every shard
// reported with its size and xxh64 and, when the job runs on more than one
// host, with its partner copy landed on another host; nothing is read or
// written in those folders (the workers materialise COMMITTED on their host
// when they resume from it).
//
// Thread-safety: not thread-safe; the JobManager calls it under its lock.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "shard/ckpt/checkpoint_tier.h"
#include "shard/ckpt/manifest.h"
#include "shard/common/status.h"

namespace shardd {

struct ShardReport {
  int rank = 0;
  int64_t step = 0;
  std::string step_dir;
  std::string manifest_base;               // Manifest JSON (run state, no files)
  std::vector<shard::ManifestFile> files;  // empty for ranks that write no shard
  shard::CheckpointTier tier = shard::CheckpointTier::kDisk;
  // Per-host memory tier (see above): commit from the reports.
  bool remote = false;
  // With remote: the job's ranks are on more than one host, so every shard
  // needs its partner copy (checkpoint.memory.replicas: 1).
  bool partner_required = false;
  // Parallel to files: the rank holding the file's partner copy, -1 = none.
  std::vector<int> partner_ranks;
};

class CheckpointCommitter {
 public:
  explicit CheckpointCommitter(int keep_last) : keep_last_(keep_last) {}

  // Records a report. Returns the committed manifest when this report
  // completed its step (COMMITTED is written), nullopt while shards are missing.
  // Retention is not applied here: deleting old steps can take long, so the
  // caller runs Retain for the committed step without holding its locks.
  shard::StatusOr<std::optional<shard::Manifest>> Add(const ShardReport& report);
  // Keeps the newest keep_last committed steps of the committed step's run in
  // its job directory (shard::ApplyRetention). Touches no committer state.
  static shard::Status Retain(const std::string& step_dir, int keep_last, const std::string& run_fingerprint);
  int keep_last() const { return keep_last_; }
  // Forgets partial steps (a new attempt begins).
  void Reset() { pending_.clear(); }
  size_t pending_steps() const { return pending_.size(); }

 private:
  struct Pending {
    std::string step_dir;
    shard::Manifest base;
    shard::CheckpointTier tier = shard::CheckpointTier::kDisk;
    std::map<int, shard::ManifestFile> shards;  // by shard rank
  };
  int keep_last_;
  // By (tier, step): each tier's saves go in step order, the tiers' do not.
  std::map<std::pair<shard::CheckpointTier, int64_t>, Pending> pending_;
};

}  // namespace shardd
