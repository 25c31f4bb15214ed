// KvStore implementations for rendezvous outside the coordinator:
//
//   InMemoryKvStore  one process, ranks as threads (unit tests, the local backend's callers)
//   FileKvStore      processes on one machine sharing a directory (multi-process tests,
//                    `shardd-worker --standalone` on one host)
//   PrefixKvStore    namespaces the keys of another store ("job/attempt/group/"), so a
//                    restarted attempt or a sub-group never reads a stale value
//
// All three are thread-safe. Timeouts return DEADLINE_EXCEEDED naming the missing key(s).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shard/common/kv_store.h"

namespace shard {

// Keys and values in a std::map guarded by one mutex; waiters sleep on a condition
// variable that every Set/Add wakes. Thread-safe: mu_ guards values_.
class InMemoryKvStore : public KvStore {
 public:
  InMemoryKvStore() = default;

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  StatusOr<bool> Check(const std::string& key) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;  // guarded by mu_
};

// One file per key under `dir` (created, with parents, if missing).
//
// * Writes go to a temp file in the same directory and are renamed over the key's file,
//   so a reader sees the old value or the new one, never a partial one. They are not
//   fsynced: this is a rendezvous store whose contents die with the job, not a record
//   that must survive a power cut.
// * Key names are escaped into safe file names (letters, digits, '-', '_' and '.' kept;
//   every other byte becomes %XX; a "k_" prefix keeps names from starting with '.');
//   very long names are shortened and suffixed with a hash of the key.
// * Get/Wait poll with short sleeps (1 ms growing to 20 ms) until the timeout.
// * Add takes an flock on "<file>.lock" around read-modify-rename, so concurrent
//   Add calls from any number of processes and threads are atomic.
//
// Thread-safe and multi-process safe; holds no state besides the directory name.
class FileKvStore : public KvStore {
 public:
  explicit FileKvStore(std::string dir);

  const std::string& dir() const { return dir_; }

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  StatusOr<bool> Check(const std::string& key) override;

  // The file name (inside dir()) that holds `key`. Exposed for tests.
  static std::string FileNameForKey(const std::string& key);

 private:
  std::string PathFor(const std::string& key) const;
  // Returns the value, NOT_FOUND if the key is absent, another error on I/O failure.
  StatusOr<std::string> TryRead(const std::string& key) const;
  Status WriteAtomically(const std::string& key, const std::string& value) const;

  const std::string dir_;
  Status init_status_;  // set once by the constructor; non-OK if dir_ could not be created
};

// Forwards to `base` with every key prefixed by `prefix` (used verbatim: pass
// "job/attempt/" with the trailing separator). Thread-safe as far as `base` is.
class PrefixKvStore : public KvStore {
 public:
  PrefixKvStore(std::shared_ptr<KvStore> base, std::string prefix);

  const std::string& prefix() const { return prefix_; }

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  StatusOr<bool> Check(const std::string& key) override;

 private:
  std::shared_ptr<KvStore> base_;
  const std::string prefix_;
};

}  // namespace shard
