// The WorkerService's rendezvous calls (KvSet/Get/Wait/Add/Check): each is
// fenced by the job table (JobTable::CheckWorker) and reaches the store under
// the job lock, so no key lands in the space of an attempt that has ended
// (AttemptLifecycle::End drops it under the same lock). The attempt's world
// size scales its caps (RendezvousLimits).
//
// Thread-safety: every method is thread-safe (takes the table's lock; the
// store's lock nests inside it, as in End). Callbacks may run before the call
// returns, with the job lock held: they must not call back in.
#pragma once

#include <string>
#include <vector>

#include "coordinator/jobs/job_table.h"
#include "coordinator/rendezvous/rendezvous_store.h"

namespace shardd {

class WorkerKv {
 public:
  WorkerKv(JobTable* table, RendezvousStore* rendezvous) : table_(table), rendezvous_(rendezvous) {}

  Status Set(const v1::WorkerId& id, const std::string& token, const std::string& key, std::string value);
  StatusOr<int64_t> Add(const v1::WorkerId& id, const std::string& token, const std::string& key, int64_t delta);
  StatusOr<bool> Check(const v1::WorkerId& id, const std::string& token, const std::string& key);
  // A refused call (fencing, caps) calls done with the error at once.
  void Get(const v1::WorkerId& id, const std::string& token, const std::string& key, int64_t deadline_ms,
           RendezvousStore::GetCallback done);
  void Wait(const v1::WorkerId& id, const std::string& token, const std::vector<std::string>& keys,
            int64_t deadline_ms, RendezvousStore::WaitCallback done);

 private:
  // The attempt's space, once the call is fenced. With the lock held.
  StatusOr<RendezvousScope> ScopeLocked(const v1::WorkerId& id, const std::string& token);

  JobTable* table_;
  RendezvousStore* rendezvous_;
};

}  // namespace shardd
