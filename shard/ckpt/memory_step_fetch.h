// A replaced host's half of the memory tier's partner copy (docs/
// control-plane.md, "Checkpoint tiers"): before a rank loads a committed
// memory step, its host's folder must hold every file of that step. The files
// still there (own copies, partners' replicas) are kept when their size and
// xxh64 match the commit; the others are fetched from ranks on other hosts
// (ShardCopyServer), then the host's COMMITTED is written from the manifest
// the coordinator committed. The step then opens like any step.
//
// Thread-safety: pure function over files and sockets; several ranks of one
// host may run it at once (every write is atomic; the same bytes land).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "shard/ckpt/manifest.h"

namespace shard {

struct MemoryStepSource {
  int rank = -1;
  std::string host;     // for what the result says
  std::string address;  // its ShardCopyServer
};

struct MemoryStepAssembly {
  bool complete = false;
  std::string step_dir;
  // "rank_00000-of-00002.shard from rank 0 on host 10.213.0.1", one per fetched file.
  std::vector<std::string> fetched;
  std::string missing;  // when !complete: the files no source had
};

// host_dir: this host's memory-tier folder; manifest: the committed step
// (every file with its size and xxh64); sources: whom to ask, in order.
// Not complete (OK status) when some file is on no source; an error only for
// a local failure (cannot write) — a source that cannot be reached is
// skipped, its error kept in `missing`. first_file: where in the manifest's
// file list to start (the ranks of one host start at their local index, so
// they mostly fetch different files: each is checked again just before it
// would be fetched).
StatusOr<MemoryStepAssembly> AssembleMemoryStep(const std::string& host_dir, const Manifest& manifest,
                                                const std::vector<MemoryStepSource>& sources,
                                                std::chrono::milliseconds timeout, size_t first_file = 0);

// The host's retention of a folder no coordinator reads: keeps the newest
// `keep` step folders at or below step `current` and deletes the older ones
// (uncommitted first). With drop_newer it also deletes every folder newer
// than `current`: an attempt's start does this with the step it resumes
// (leftovers of an attempt or run that got further are never resumable now,
// and would crowd out this run's steps); during training a newer folder may
// be a faster partner's fresh copy, so it stays. Ranks of one host may race
// here: a folder already gone is fine.
Status KeepNewestMemorySteps(const std::string& host_dir, int64_t current, int keep, bool drop_newer = false);

}  // namespace shard
