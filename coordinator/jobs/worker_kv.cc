#include "coordinator/jobs/worker_kv.h"

namespace shardd {
namespace {

// A waiting call with no scope: answers `done` with why, after releasing the
// table's lock (done may call back into the table).
template <typename Lock, typename Done>
bool Refused(const StatusOr<RendezvousScope>& scope, Lock& lock, Done& done) {
  if (scope.ok()) return false;
  lock.unlock();
  done(scope.status());
  return true;
}

}  // namespace

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
  if (Refused(scope, lock, done)) return;
  rendezvous_->Get(*scope, key, deadline_ms, std::move(done));
}

void WorkerKv::Wait(const v1::WorkerId& id, const std::string& token, const std::vector<std::string>& keys,
                    int64_t deadline_ms, RendezvousStore::WaitCallback done) {
  auto lock = table_->Lock();
  auto scope = ScopeLocked(id, token);
  if (Refused(scope, lock, done)) return;
  rendezvous_->Wait(*scope, keys, deadline_ms, std::move(done));
}

}  // namespace shardd
