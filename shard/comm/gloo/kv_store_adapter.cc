#include "shard/comm/gloo/kv_store_adapter.h"

#include <gloo/common/error.h>

namespace shard::comm {

KvStoreAdapter::KvStoreAdapter(std::shared_ptr<KvStore> store, std::chrono::milliseconds timeout)
    : store_(std::move(store)), timeout_(timeout) {}

void KvStoreAdapter::Throw(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.ok()) first_error_ = status;
  }
  throw ::gloo::IoException("rendezvous store: " + status.ToString());
}

void KvStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  Status st = store_->Set(key, std::string(data.begin(), data.end()));
  if (!st.ok()) Throw(st);
}

std::vector<char> KvStoreAdapter::get(const std::string& key) {
  StatusOr<std::string> v = store_->Get(key, timeout_);
  if (!v.ok()) Throw(v.status());
  return std::vector<char>(v->begin(), v->end());
}

void KvStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void KvStoreAdapter::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  Status st = store_->Wait(keys, timeout);
  if (!st.ok()) Throw(st);
}

Status KvStoreAdapter::first_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

}  // namespace shard::comm
