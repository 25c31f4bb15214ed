// Reading checkpoints back: which steps exist, which are committed and intact,
// and which byte ranges of which shard files a (possibly different) layout needs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"

namespace shard {

struct StepInfo {
  int64_t step = 0;  // from the folder's name; the manifest's own step may differ
  std::string dir;
  bool committed = false;
  bool link = false;  // the folder is a symbolic link (to a folder inside job_dir)
};
// Step directories of a job directory, oldest first (a missing directory is
// empty). A step folder that is a symbolic link counts only when it resolves
// to a folder inside job_dir: a link leading out (say to another run's step)
// is never this job's step, so nothing lists, resumes from or deletes it.
StatusOr<std::vector<StepInfo>> ListSteps(const std::string& job_dir);

// Whether `entry` of job_dir may count as one of job_dir's step folders: a
// directory that is not a link, or a link that resolves to a directory inside
// job_dir (canonical paths, so "..", nested links and a linked job_dir are
// seen through). job_canonical: fs::canonical(job_dir).
bool IsOwnStepFolder(const std::filesystem::path& job_canonical, const std::filesystem::path& entry);

// "step_00000100" → 100; nullopt for any other name.
std::optional<int64_t> StepOfDirName(const std::string& name);

// One piece of a unit range to read: elements [from, from+count) of unit
// `unit` from file `file`, landing at dst_offset of the destination.
struct ReadPiece {
  int file = 0;
  int64_t from = 0;
  int64_t count = 0;
  int64_t dst_offset = 0;
};
// Pure: the pieces of [begin, end) of unit `unit` (clipped to the unit's numel)
// held by the given headers' unit ranges. Elements not covered are left out.
std::vector<ReadPiece> PlanUnitRead(const std::vector<ShardHeader>& headers, int unit, int64_t begin, int64_t end);

// An opened committed step: the manifest plus every shard header.
class CheckpointReader {
 public:
  // Checks the manifest, that a folder named step_N holds the manifest of
  // step N (not a copy or link of another step), that every listed file
  // exists with its size, that the headers parse and agree with the manifest
  // (step, units, model hash) and, with verify_checksums, each file's xxh64.
  // Errors name the bad file.
  static StatusOr<CheckpointReader> Open(const std::string& step_dir, bool verify_checksums);

  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  // Fills params/m/v (any may be null) with elements [begin, end) of unit `unit`;
  // positions past the unit's numel (FSDP padding) become 0. Errors if a needed
  // element is in no file.
  Status ReadUnitRange(int unit, int64_t begin, int64_t end, float* params, float* m, float* v) const;
  // How the optimizer state was held when saved (optim.state_dtype): bf16 if
  // any shard holds a bf16 unit, else fp32. ReadUnitRange widens either way.
  DType state_dtype() const;

 private:
  std::string dir_;
  Manifest manifest_;
  std::vector<ShardFileReader> files_;
  std::vector<ShardHeader> headers_;
};

// Which committed steps a search may choose: `accept` (empty = all) sees each
// step's manifest before its files are read; a step it refuses belongs to
// another run and is skipped without counting as damaged.
using StepFilter = std::function<bool(const Manifest&)>;

// Newest committed step of job_dir that `accept` takes and that opens (and
// verifies) cleanly, falling back to older ones with a warning naming what
// was wrong; NOT_FOUND if none (saying how many were damaged or another run's).
StatusOr<std::string> FindLatestGoodStep(const std::string& job_dir, bool verify_checksums,
                                         const StepFilter& accept = {});

}  // namespace shard
