// The rendezvous key-value store the coordinator serves to workers (gloo's
// store and the NCCL unique id go through it). Unlike shard::KvStore it never
// blocks: a Get for a missing key parks a callback that fires when the key is
// set or its deadline passes (ExpireWaiters), so a gRPC callback thread is
// never held by a waiting rank.
//
// Thread-safety: all methods are thread-safe; callbacks run without the lock held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardd {

class RendezvousStore {
 public:
  using GetCallback = std::function<void(shard::StatusOr<std::string>)>;
  using WaitCallback = std::function<void(shard::Status)>;

  void Set(const std::string& key, std::string value);
  // Calls done with the value once the key exists, or DEADLINE_EXCEEDED naming
  // the key once now_ms >= deadline_ms at an ExpireWaiters call.
  void Get(const std::string& key, int64_t deadline_ms, GetCallback done);
  void Wait(const std::vector<std::string>& keys, int64_t deadline_ms, WaitCallback done);
  int64_t Add(const std::string& key, int64_t delta);
  bool Check(const std::string& key);
  void ExpireWaiters(int64_t now_ms);
  // Forgets every key under prefix (an attempt is over); its waiters fail.
  void DropPrefix(const std::string& prefix);
  size_t size();

 private:
  struct Waiter {
    std::vector<std::string> keys;
    int64_t deadline_ms;
    GetCallback get;    // set for Get
    WaitCallback wait;  // set for Wait
  };
  // Moves every satisfied waiter into `ready`; caller runs them unlocked.
  void CollectReadyLocked(std::vector<std::function<void()>>* ready);

  std::mutex mu_;
  std::map<std::string, std::string> kv_;  // guarded by mu_
  std::vector<Waiter> waiters_;            // guarded by mu_
};

}  // namespace shardd
