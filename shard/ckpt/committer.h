// The commit protocol. Writers report each shard they wrote (a small report
// file beside it: name, size, xxh64); exactly one committer waits for every
// report of a step, then writes COMMITTED atomically and applies retention.
// In standalone mode rank 0 commits; the coordinator takes this role once the
// control plane exists (it receives the same reports over RPC).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"

namespace shard {

// Writes "<shard file>.report" atomically.
Status WriteShardReport(const std::string& step_dir, const WrittenFile& file, int shard_rank);
// Reads every report present in step_dir.
StatusOr<std::vector<ManifestFile>> ReadShardReports(const std::string& step_dir);

// Waits (polling) until step_dir holds reports for shards 0..shard_count-1,
// then writes COMMITTED from `base` plus the reported files.
Status CommitStep(const std::string& step_dir, Manifest base, std::chrono::milliseconds timeout);

// Keeps the newest `keep_last` committed steps of the run `run_fingerprint`
// (Manifest::run_fingerprint; "" = steps written without one) in job_dir.
// Deletes its older committed steps, and uncommitted step directories older
// than its newest committed one (leftovers of crashed saves); never the newest
// committed step, never a step newer than it (a save may be in flight), and
// never a step of another run that shares the directory. Never follows a
// link: a step folder that links out of job_dir is not one of its steps
// (ListSteps), and one that links inside is removed as a link. Deletes
// inside the opened folder `dir_fd` (-1: job_dir, opened here).
Status ApplyRetention(const std::string& job_dir, int keep_last, const std::string& run_fingerprint = "",
                      int dir_fd = -1);

}  // namespace shard
