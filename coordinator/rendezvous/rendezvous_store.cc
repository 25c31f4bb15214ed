#include "coordinator/rendezvous/rendezvous_store.h"

#include <algorithm>
#include <cctype>

#include "proto/codec/attempt_ended.h"
#include "shard/common/logging.h"

namespace shardd {
namespace {

size_t Scaled(size_t base, size_t per_rank, int world_size) {
  return base + per_rank * static_cast<size_t>(std::max(world_size, 1));
}

// A key as an error may show it: its first 64 bytes, unprintables as '?'.
std::string Shown(const std::string& key) {
  std::string s = key.substr(0, 64);
  for (char& c : s)
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  return "'" + s + (key.size() > 64 ? "...'" : "'");
}

shard::Status Exhausted(const RendezvousScope& scope, const std::string& what) {
  return shard::ResourceExhausted("rendezvous of attempt " + scope.prefix + ": " + what);
}

shard::Status CheckKey(const RendezvousScope& scope, const std::string& key) {
  if (key.size() <= RendezvousLimits::kMaxKeyBytes) return shard::OkStatus();
  return Exhausted(scope, "key " + Shown(key) + " is " + std::to_string(key.size()) +
                              " bytes, over the key-size cap of " + std::to_string(RendezvousLimits::kMaxKeyBytes));
}

}  // namespace

size_t RendezvousLimits::MaxKeys(int world_size) { return Scaled(kMaxKeysBase, kMaxKeysPerRank, world_size); }
size_t RendezvousLimits::MaxBytes(int world_size) { return Scaled(kMaxBytesBase, kMaxBytesPerRank, world_size); }
size_t RendezvousLimits::MaxWaiters(int world_size) {
  return Scaled(kMaxWaitersBase, kMaxWaitersPerRank, world_size);
}

shard::Status RendezvousStore::CheckPutLocked(const RendezvousScope& scope, const Space& space,
                                              const std::string& key, size_t value_bytes) const {
  RETURN_IF_ERROR(CheckKey(scope, key));
  if (value_bytes > RendezvousLimits::kMaxValueBytes)
    return Exhausted(scope, "value of key " + Shown(key) + " is " + std::to_string(value_bytes) +
                                " bytes, over the value-size cap of " +
                                std::to_string(RendezvousLimits::kMaxValueBytes));
  auto it = space.kv.find(key);
  const bool fresh = it == space.kv.end();
  const size_t max_keys = RendezvousLimits::MaxKeys(scope.world_size);
  if (fresh && space.kv.size() + 1 > max_keys)
    return Exhausted(scope, "key " + Shown(key) + " would be key " + std::to_string(space.kv.size() + 1) +
                                ", over the cap of " + std::to_string(max_keys) + " keys per job (world size " +
                                std::to_string(scope.world_size) + ")");
  const size_t old_bytes = fresh ? 0 : key.size() + it->second.size();
  const size_t after = space.bytes - old_bytes + key.size() + value_bytes;
  const size_t max_bytes = RendezvousLimits::MaxBytes(scope.world_size);
  if (after > max_bytes)
    return Exhausted(scope, "key " + Shown(key) + " would bring the job's keys and values to " +
                                std::to_string(after) + " bytes, over the cap of " + std::to_string(max_bytes) +
                                " bytes per job (world size " + std::to_string(scope.world_size) + ")");
  return shard::OkStatus();
}

shard::Status RendezvousStore::CheckWaitLocked(const RendezvousScope& scope, const Space& space,
                                               const std::vector<std::string>& keys) const {
  for (const std::string& k : keys) RETURN_IF_ERROR(CheckKey(scope, k));
  const size_t max_keys = RendezvousLimits::MaxKeys(scope.world_size);
  if (keys.size() > max_keys)
    return Exhausted(scope, "a wait for " + std::to_string(keys.size()) + " keys, over the cap of " +
                                std::to_string(max_keys) + " keys per job");
  const size_t max_waiters = RendezvousLimits::MaxWaiters(scope.world_size);
  if (space.waiters.size() + 1 > max_waiters)
    return Exhausted(scope, std::to_string(space.waiters.size()) + " calls already wait, the cap of " +
                                std::to_string(max_waiters) + " parked calls per job (world size " +
                                std::to_string(scope.world_size) + ")");
  return shard::OkStatus();
}

void RendezvousStore::PutLocked(Space& space, const std::string& key, std::string value) {
  auto it = space.kv.find(key);
  if (it != space.kv.end()) space.bytes -= key.size() + it->second.size();
  space.bytes += key.size() + value.size();
  space.kv[key] = std::move(value);
}

void RendezvousStore::CollectReadyLocked(Space& space, std::vector<std::function<void()>>* ready) {
  auto& kv = space.kv;
  for (auto it = space.waiters.begin(); it != space.waiters.end();) {
    bool all = std::all_of(it->keys.begin(), it->keys.end(), [&](const std::string& k) { return kv.count(k) > 0; });
    if (!all) {
      ++it;
      continue;
    }
    if (it->get) {
      ready->push_back([cb = std::move(it->get), v = kv[it->keys[0]]] { cb(v); });
    } else {
      ready->push_back([cb = std::move(it->wait)] { cb(shard::OkStatus()); });
    }
    it = space.waiters.erase(it);
  }
}

shard::Status RendezvousStore::Set(const RendezvousScope& scope, const std::string& key, std::string value) {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Space& space = spaces_[scope.prefix];
    if (auto st = CheckPutLocked(scope, space, key, value.size()); !st.ok()) {
      if (space.kv.empty() && space.waiters.empty()) spaces_.erase(scope.prefix);
      return st;
    }
    LOG_DEBUG("rendezvous: set {}{} ({} bytes)", scope.prefix, key, value.size());
    PutLocked(space, key, std::move(value));
    CollectReadyLocked(space, &ready);
  }
  for (auto& f : ready) f();
  return shard::OkStatus();
}

void RendezvousStore::Get(const RendezvousScope& scope, const std::string& key, int64_t deadline_ms,
                          GetCallback done) {
  std::unique_lock<std::mutex> lock(mu_);
  Space& space = spaces_[scope.prefix];
  auto it = space.kv.find(key);
  if (it != space.kv.end()) {
    std::string v = it->second;
    lock.unlock();
    done(std::move(v));
    return;
  }
  if (auto st = CheckWaitLocked(scope, space, {key}); !st.ok()) {
    if (space.kv.empty() && space.waiters.empty()) spaces_.erase(scope.prefix);
    lock.unlock();
    done(st);
    return;
  }
  space.waiters.push_back({{key}, deadline_ms, std::move(done), nullptr});
}

void RendezvousStore::Wait(const RendezvousScope& scope, const std::vector<std::string>& keys, int64_t deadline_ms,
                           WaitCallback done) {
  LOG_DEBUG("rendezvous: wait for {} key(s) of {}{}{}", keys.size(), scope.prefix, keys.empty() ? "" : ", first ",
            keys.empty() ? "" : keys[0].substr(0, 64));
  std::unique_lock<std::mutex> lock(mu_);
  Space& space = spaces_[scope.prefix];
  shard::Status st = CheckWaitLocked(scope, space, keys);
  const bool now = st.ok() && std::all_of(keys.begin(), keys.end(), [&](const std::string& k) {
                     return space.kv.count(k) > 0;
                   });
  if (!st.ok() || now) {
    if (space.kv.empty() && space.waiters.empty()) spaces_.erase(scope.prefix);
    lock.unlock();
    done(st);
    return;
  }
  space.waiters.push_back({keys, deadline_ms, nullptr, std::move(done)});
}

shard::StatusOr<int64_t> RendezvousStore::Add(const RendezvousScope& scope, const std::string& key, int64_t delta) {
  std::vector<std::function<void()>> ready;
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Space& space = spaces_[scope.prefix];
    auto it = space.kv.find(key);
    if (it != space.kv.end()) {
      try {
        value = std::stoll(it->second);
      } catch (...) {
        value = 0;
      }
    }
    // Wraps like the two's-complement sum it is, never undefined.
    value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(delta));
    std::string text = std::to_string(value);
    if (auto st = CheckPutLocked(scope, space, key, text.size()); !st.ok()) {
      if (space.kv.empty() && space.waiters.empty()) spaces_.erase(scope.prefix);
      return st;
    }
    PutLocked(space, key, std::move(text));
    CollectReadyLocked(space, &ready);
  }
  for (auto& f : ready) f();
  return value;
}

shard::StatusOr<bool> RendezvousStore::Check(const RendezvousScope& scope, const std::string& key) {
  RETURN_IF_ERROR(CheckKey(scope, key));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = spaces_.find(scope.prefix);
  return it != spaces_.end() && it->second.kv.count(key) > 0;
}

void RendezvousStore::ExpireWaiters(int64_t now_ms) {
  std::vector<std::function<void()>> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [prefix, space] : spaces_) {
      for (auto it = space.waiters.begin(); it != space.waiters.end();) {
        if (it->deadline_ms > now_ms) {
          ++it;
          continue;
        }
        std::string missing;
        for (const auto& k : it->keys)
          if (!space.kv.count(k)) missing += (missing.empty() ? "" : ", ") + prefix + k;
        shard::Status st = shard::DeadlineExceeded("rendezvous: key(s) never set: " + missing);
        if (it->get) expired.push_back([cb = std::move(it->get), st] { cb(st); });
        else expired.push_back([cb = std::move(it->wait), st] { cb(st); });
        it = space.waiters.erase(it);
      }
    }
    for (auto it = spaces_.begin(); it != spaces_.end();)
      it = it->second.kv.empty() && it->second.waiters.empty() ? spaces_.erase(it) : std::next(it);
  }
  for (auto& f : expired) f();
}

void RendezvousStore::Drop(const std::string& prefix) {
  std::vector<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = spaces_.find(prefix);
    if (it == spaces_.end()) return;
    for (Waiter& w : it->second.waiters) {
      shard::Status st = AttemptEnded("rendezvous: the attempt is over");
      if (w.get) dropped.push_back([cb = std::move(w.get), st] { cb(st); });
      else dropped.push_back([cb = std::move(w.wait), st] { cb(st); });
    }
    spaces_.erase(it);
  }
  for (auto& f : dropped) f();
}

size_t RendezvousStore::size() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [prefix, space] : spaces_) n += space.kv.size();
  return n;
}

size_t RendezvousStore::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [prefix, space] : spaces_) n += space.bytes;
  return n;
}

}  // namespace shardd
