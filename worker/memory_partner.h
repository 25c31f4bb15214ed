// A worker's part of the per-host memory tier (checkpoint.memory for a job
// whose ranks may span hosts; docs/control-plane.md, "Checkpoint tiers").
// The coordinator cannot read the hosts' tmpfs, so the workers
//  * keep their host's steps in <memory root>/host-<hostname>;
//  * serve that folder (shard/ckpt/shard_copy.h) at an address published in
//    the attempt's rendezvous store ("memtier/addr/<rank>": host, endpoint with its key);
//  * send each memory shard they write to their partner on another host
//    (shard/ckpt/partner_map.h) before reporting it;
//  * on a resume from a memory step, assemble the step in their host's folder
//    (fetching what a replaced host lacks) and agree, through the store
//    ("memtier/resume/<rank>"), on taking it — or all take the disk step;
//  * apply their host's retention and remove the folder when the job succeeds.
//
// Thread-safety: Start and Resume on the main thread before training;
// AfterMemorySave from the checkpoint thread; the server runs on its own.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_copy.h"
#include "shard/common/kv_store.h"

namespace shardd {

struct MemoryPartnerOptions {
  int rank = 0;
  int world = 1;
  std::string hostname;  // the worker's --hostname: its host's name and the address it listens on
  std::string root;      // the job's memory tier folder (RegisterResponse.memory_tier_dir)
  int keep = 3;          // host-side retention: memory.keep_last + 1 (one more is written before the oldest goes)
  bool replicas = true;  // checkpoint.memory.replicas > 0
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // rendezvous waits, fetches, the server's io
  // One partner copy (AfterMemorySave), start to end. The checkpoint thread
  // makes it, and the training thread waits for that thread at its next save
  // at most this long: keep it below parallel.comm_timeout_s (the worker
  // takes half of it), so the other ranks' collectives never time out over a
  // stalled copy; the copy that overran costs its memory step only.
  std::chrono::milliseconds copy_timeout{std::chrono::seconds(30)};
};

// What the ranks agreed to resume from.
struct MemoryResume {
  std::string step_dir;  // this host's copy of the memory step; "" = take the disk choice
  std::string note;      // what was fetched from partners for the step taken
  // Each committed memory step passed over, newest first: "skipping step 530
  // (memory): rank 1 on host b lacks rank_00001-of-00002.shard (…)".
  std::vector<std::string> events;
};

class MemoryPartner {
 public:
  // Starts the server, publishes its address and waits for every rank's.
  static shard::StatusOr<std::unique_ptr<MemoryPartner>> Start(std::shared_ptr<shard::KvStore> kv,
                                                               const MemoryPartnerOptions& opts);
  ~MemoryPartner();

  const std::string& host_dir() const { return host_dir_; }
  int partner_rank() const { return partner_; }

  // manifests: the committed memory steps to try, newest first (Manifest
  // JSON each; none: only the host's leftovers newer than resume_step are
  // dropped). Each is assembled on every host and agreed on in the store; the
  // first every host holds is taken, each one before it is an event.
  shard::StatusOr<MemoryResume> Resume(const std::vector<std::string>& manifests, int64_t resume_step);

  // After this rank wrote memory step `step_dir`'s `file`: copies it to the
  // partner. Returns the partner's rank when it landed, -1 when there is none
  // (one host, replicas 0) or the copy failed or overran copy_timeout
  // (logged; the coordinator then records memory_step_not_committed and the
  // run goes on). Then applies the host's retention.
  int AfterMemorySave(const std::string& step_dir, const std::string& file, int64_t step);

  // The job succeeded: stop serving and remove the host's folder.
  void RemoveHostFolder();

 private:
  MemoryPartner() = default;
  // Assembles one committed step on this host and agrees on it with every
  // rank: true when every host holds it (*note: what was fetched), else false
  // with *why naming a rank, its host and the files it lacks.
  shard::StatusOr<bool> TryStep(const shard::Manifest& m, std::string* step_dir, std::string* note,
                                std::string* why);

  MemoryPartnerOptions opts_;
  std::shared_ptr<shard::KvStore> kv_;
  std::string host_dir_;
  std::unique_ptr<shard::ShardCopyServer> server_;
  std::vector<std::string> hosts_;      // per rank
  std::vector<std::string> addresses_;  // per rank
  int partner_ = -1;
};

}  // namespace shardd
