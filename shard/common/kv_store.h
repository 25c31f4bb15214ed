// The key-value store at the bottom of rendezvous. Communicators bootstrap
// through it (Gloo's store, the NCCL unique id); the coordinator serves it over
// gRPC; tests use the in-memory or file store. Keys are namespaced by job and
// attempt with PrefixKvStore, so a restarted attempt never reads a stale value.
//
// Implementations are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shard {

class KvStore {
 public:
  virtual ~KvStore() = default;

  // Sets key to value (overwrites).
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Returns the value of key, waiting up to `timeout` for it to appear.
  // DEADLINE_EXCEEDED names the key when it never does.
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Waits until every key exists.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer stored at key (absent = 0); returns the new value.
  virtual StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // True if key exists now (does not wait).
  virtual StatusOr<bool> Check(const std::string& key) = 0;
};

}  // namespace shard
