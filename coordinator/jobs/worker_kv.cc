#include "coordinator/jobs/worker_kv.h"

namespace shardd {

StatusOr<RendezvousScope> WorkerKv::ScopeLocked(const v1::WorkerId& id, const std::string& token) {
  ASSIGN_OR_RETURN(Job * j, table_->CheckWorker(id, token));
  return RendezvousScope{AttemptKvPrefix(id), static_cast<int>(j->ranks.size())};
}

Status WorkerKv::Set(const v1::WorkerId& id, const std::string& token, const std::string& key, std::string value) {
  auto lock = table_->Lock();
  ASSIGN_OR_RETURN(RendezvousScope scope, ScopeLocked(id, token));
  return rendezvous_->Set(scope, key, std::move(value));
}

StatusOr<int64_t> WorkerKv::Add(const v1::WorkerId& id, const std::string& token, const std::string& key,
                                int64_t delta) {
  auto lock = table_->Lock();
  ASSIGN_OR_RETURN(RendezvousScope scope, ScopeLocked(id, token));
  return rendezvous_->Add(scope, key, delta);
}

StatusOr<bool> WorkerKv::Check(const v1::WorkerId& id, const std::string& token, const std::string& key) {
  auto lock = table_->Lock();
  ASSIGN_OR_RETURN(RendezvousScope scope, ScopeLocked(id, token));
  return rendezvous_->Check(scope, key);
}

void WorkerKv::Get(const v1::WorkerId& id, const std::string& token, const std::string& key, int64_t deadline_ms,
                   RendezvousStore::GetCallback done) {
  auto lock = table_->Lock();
  auto scope = ScopeLocked(id, token);
  if (!scope.ok()) {
    lock.unlock();
    done(scope.status());
    return;
  }
  rendezvous_->Get(*scope, key, deadline_ms, std::move(done));
}

void WorkerKv::Wait(const v1::WorkerId& id, const std::string& token, const std::vector<std::string>& keys,
                    int64_t deadline_ms, RendezvousStore::WaitCallback done) {
  auto lock = table_->Lock();
  auto scope = ScopeLocked(id, token);
  if (!scope.ok()) {
    lock.unlock();
    done(scope.status());
    return;
  }
  rendezvous_->Wait(*scope, keys, deadline_ms, std::move(done));
}

}  // namespace shardd
