// The rendezvous key-value store the coordinator serves to workers (gloo's
// store and the NCCL unique id go through it). Unlike shard::KvStore it never
// blocks: a Get for a missing key parks a callback that fires when the key is
// set or its deadline passes (ExpireWaiters), so a gRPC callback thread is
// never held by a waiting rank.
//
// Keys live in spaces, one per attempt (its prefix "<job>/<attempt>/"), and
// each space is bounded (RendezvousLimits): a holder of one job's token can
// fill that job's space and no more; RESOURCE_EXHAUSTED names the cap and the
// numbers. Drop(prefix) forgets an attempt's space when the attempt ends.
//
// Thread-safety: all methods are thread-safe; callbacks run without the lock held.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardd {

// The caps of one attempt's space. What the workers store, per rank and
// communicator group: gloo's full-mesh address list (one key per rank, ~136 B
// per peer: a sockaddr_storage and a sequence number), the NCCL unique id
// (256 hex chars, rank 0 of each group), the memory tier's partner-copy
// address ("host\nhost:port#key") and one resume verdict per memory step
// tried, a peer-barrier flag. Keys are "shard0/gloo/3"-like, under 100 bytes.
struct RendezvousLimits {
  // 10x the longest key the workers build (group and memory-step names included).
  static constexpr size_t kMaxKeyBytes = 1024;
  // One gloo address list of a group of ~7,700 ranks (136 B a peer); an NCCL
  // id is 256 B. gRPC's own message limit is 4 MiB.
  static constexpr size_t kMaxValueBytes = 1 << 20;
  // A rank sets ~10 keys an attempt (2 groups, the memory tier, a barrier,
  // one verdict per memory step tried): 1,024 a rank is 100x that. The base
  // keeps tiny jobs' headroom.
  static constexpr size_t kMaxKeysBase = 4096;
  static constexpr size_t kMaxKeysPerRank = 1024;
  // Bytes of keys and values together. A rank's largest real value is its
  // gloo address list (136 B x world); 2 MiB a rank holds a full value of
  // each of its two groups at the value cap. The base: 16 MiB for any job.
  static constexpr size_t kMaxBytesBase = 16u << 20;
  static constexpr size_t kMaxBytesPerRank = 2u << 20;
  // Parked Get/Wait calls: a rank parks at most a few at once (one per group
  // being built); 64 a rank bounds a client that parks calls and never reads.
  static constexpr size_t kMaxWaitersBase = 256;
  static constexpr size_t kMaxWaitersPerRank = 64;

  static size_t MaxKeys(int world_size);
  static size_t MaxBytes(int world_size);
  static size_t MaxWaiters(int world_size);
};

// One attempt's space: its key prefix (AttemptKvPrefix) and its world size,
// which scales the caps.
struct RendezvousScope {
  std::string prefix;
  int world_size = 1;
};

class RendezvousStore {
 public:
  using GetCallback = std::function<void(shard::StatusOr<std::string>)>;
  using WaitCallback = std::function<void(shard::Status)>;

  // Keys are relative to scope.prefix. RESOURCE_EXHAUSTED (nothing stored)
  // when the key or value is over its cap, or the space would hold more keys
  // or bytes than its caps; overwriting a key counts its new size only.
  shard::Status Set(const RendezvousScope& scope, const std::string& key, std::string value);
  // Calls done with the value once the key exists, or DEADLINE_EXCEEDED naming
  // the key once now_ms >= deadline_ms at an ExpireWaiters call; at once with
  // RESOURCE_EXHAUSTED when the key is too long or the space has its cap of
  // parked calls.
  void Get(const RendezvousScope& scope, const std::string& key, int64_t deadline_ms, GetCallback done);
  void Wait(const RendezvousScope& scope, const std::vector<std::string>& keys, int64_t deadline_ms,
            WaitCallback done);
  // Adds delta to the integer at key (absent or not a number: 0); the caps as Set.
  shard::StatusOr<int64_t> Add(const RendezvousScope& scope, const std::string& key, int64_t delta);
  shard::StatusOr<bool> Check(const RendezvousScope& scope, const std::string& key);
  void ExpireWaiters(int64_t now_ms);
  // Forgets the space of the attempt with this prefix (it is over); its
  // waiters fail with ABORTED.
  void Drop(const std::string& prefix);
  // Keys and bytes held, over every space (for tests and the log).
  size_t size();
  size_t bytes();

 private:
  struct Waiter {
    std::vector<std::string> keys;
    int64_t deadline_ms;
    GetCallback get;    // set for Get
    WaitCallback wait;  // set for Wait
  };
  struct Space {
    std::map<std::string, std::string> kv;
    size_t bytes = 0;  // keys and values
    std::vector<Waiter> waiters;
  };
  // OK, or the cap that storing value_bytes at key (new, or in place of its
  // value) would pass. With mu_ held.
  shard::Status CheckPutLocked(const RendezvousScope& scope, const Space& space, const std::string& key,
                               size_t value_bytes) const;
  shard::Status CheckWaitLocked(const RendezvousScope& scope, const Space& space,
                                const std::vector<std::string>& keys) const;
  void PutLocked(Space& space, const std::string& key, std::string value);
  // Moves every satisfied waiter of space into `ready`; caller runs them unlocked.
  static void CollectReadyLocked(Space& space, std::vector<std::function<void()>>* ready);

  std::mutex mu_;
  std::map<std::string, Space> spaces_;  // by prefix; guarded by mu_
};

}  // namespace shardd
