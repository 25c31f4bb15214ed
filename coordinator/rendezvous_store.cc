#include "coordinator/rendezvous_store.h"

#include <algorithm>

#include "proto/codec/attempt_ended.h"
#include "shard/common/logging.h"

namespace shardd {

void RendezvousStore::CollectReadyLocked(std::vector<std::function<void()>>* ready) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    bool all = std::all_of(it->keys.begin(), it->keys.end(), [&](const std::string& k) { return kv_.count(k) > 0; });
    if (!all) {
      ++it;
      continue;
    }
    if (it->get) {
      ready->push_back([cb = std::move(it->get), v = kv_[it->keys[0]]] { cb(v); });
    } else {
      ready->push_back([cb = std::move(it->wait)] { cb(shard::OkStatus()); });
    }
    it = waiters_.erase(it);
  }
}

void RendezvousStore::Set(const std::string& key, std::string value) {
  LOG_DEBUG("rendezvous: set {} ({} bytes)", key, value.size());
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = std::move(value);
    CollectReadyLocked(&ready);
  }
  for (auto& f : ready) f();
}

void RendezvousStore::Get(const std::string& key, int64_t deadline_ms, GetCallback done) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = kv_.find(key);
  if (it != kv_.end()) {
    std::string v = it->second;
    lock.unlock();
    done(std::move(v));
    return;
  }
  waiters_.push_back({{key}, deadline_ms, std::move(done), nullptr});
}

void RendezvousStore::Wait(const std::vector<std::string>& keys, int64_t deadline_ms, WaitCallback done) {
  LOG_DEBUG("rendezvous: wait for {} key(s){}{}", keys.size(), keys.empty() ? "" : ", first ", keys.empty() ? "" : keys[0]);
  std::unique_lock<std::mutex> lock(mu_);
  if (std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return kv_.count(k) > 0; })) {
    lock.unlock();
    done(shard::OkStatus());
    return;
  }
  waiters_.push_back({keys, deadline_ms, nullptr, std::move(done)});
}

int64_t RendezvousStore::Add(const std::string& key, int64_t delta) {
  std::vector<std::function<void()>> ready;
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    if (it != kv_.end()) {
      try {
        value = std::stoll(it->second);
      } catch (...) {
        value = 0;
      }
    }
    value += delta;
    kv_[key] = std::to_string(value);
    CollectReadyLocked(&ready);
  }
  for (auto& f : ready) f();
  return value;
}

bool RendezvousStore::Check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return kv_.count(key) > 0;
}

void RendezvousStore::ExpireWaiters(int64_t now_ms) {
  std::vector<std::function<void()>> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline_ms > now_ms) {
        ++it;
        continue;
      }
      std::string missing;
      for (const auto& k : it->keys)
        if (!kv_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
      shard::Status st = shard::DeadlineExceeded("rendezvous: key(s) never set: " + missing);
      if (it->get) expired.push_back([cb = std::move(it->get), st] { cb(st); });
      else expired.push_back([cb = std::move(it->wait), st] { cb(st); });
      it = waiters_.erase(it);
    }
  }
  for (auto& f : expired) f();
}

void RendezvousStore::DropPrefix(const std::string& prefix) {
  std::vector<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.rfind(prefix, 0) == 0;) it = kv_.erase(it);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->keys.empty() || it->keys[0].rfind(prefix, 0) != 0) {
        ++it;
        continue;
      }
      shard::Status st = AttemptEnded("rendezvous: the attempt is over");
      if (it->get) dropped.push_back([cb = std::move(it->get), st] { cb(st); });
      else dropped.push_back([cb = std::move(it->wait), st] { cb(st); });
      it = waiters_.erase(it);
    }
  }
  for (auto& f : dropped) f();
}

size_t RendezvousStore::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return kv_.size();
}

}  // namespace shardd
