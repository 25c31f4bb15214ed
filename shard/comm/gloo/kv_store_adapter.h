// Lets Gloo's rendezvous (connectFullMesh) use a shard::KvStore: the coordinator's
// store in production, the file or in-memory store in tests.
//
// Gloo's Store interface reports errors by throwing, so this adapter throws
// gloo::IoException; it also remembers the first store error as a Status, so the
// caller can return the store's own code (e.g. DEADLINE_EXCEEDED naming the missing
// rank's key) instead of a generic I/O error. Thread-safe as far as the store is.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "shard/common/kv_store.h"

namespace shard::comm {

class KvStoreAdapter : public ::gloo::rendezvous::Store {
 public:
  // `timeout` bounds get() and the wait() overload without one.
  KvStoreAdapter(std::shared_ptr<KvStore> store, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The first error a store call returned (OK if none).
  Status first_error() const;

 private:
  [[noreturn]] void Throw(const Status& status);

  const std::shared_ptr<KvStore> store_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  Status first_error_;  // guarded by mu_
};

}  // namespace shard::comm
