// The job table: every Job, its events and watchers, the next job number and
// the worker fencing rules — behind the one job lock. Every state change is
// one stored transaction (Emit writes the event and the job's record
// together), then goes to the job's watchers.
//
// Thread-safety: Lock() returns the job lock; every other method needs it
// held (the table is the only place that lock lives). Watch sinks are called
// with it held and must not call back in. Nothing slow runs under it: the
// classes beside this one call launchers and verify checkpoints without it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "coordinator/jobs/job.h"
#include "coordinator/jobs/job_options.h"
#include "coordinator/state/state_store.h"

namespace shardd {

class JobTable {
 public:
  using EventSink = std::function<void(const v1::JobEvent&)>;
  using Jobs = std::map<std::string, std::unique_ptr<Job>>;

  JobTable(const JobManagerOptions& opts, StateStore* store) : opts_(opts), store_(store) {}
  // The job lock.
  std::unique_lock<std::mutex> Lock() { return std::unique_lock<std::mutex>(mu_); }
  // The local scheduler's allocator, for the placement in StatusOf (null: none).
  void set_allocator(const sched::HostAllocator* alloc) { alloc_ = alloc; }
  const sched::HostAllocator* allocator() const { return alloc_; }
  StateStore* store() const { return store_; }

  // ---- with the lock held ----
  Jobs& jobs() { return jobs_; }
  StatusOr<Job*> Find(const std::string& job_id);
  // "<name>-<next number>", and the number is used up.
  std::string NewJobId(const std::string& name) { return name + "-" + std::to_string(next_job_number_++); }
  Job& Insert(std::unique_ptr<Job> job);
  // After a restart: numbers continue after the stored ones.
  void set_next_job_number(int64_t n) { next_job_number_ = n; }
  // Records an event and the job's (possibly new) state in one transaction;
  // a refused write is the job's store failure (NoteStoreFailure).
  void Emit(Job& j, const std::string& kind, const std::string& message);
  // Keeps the first refused write of the job's record in j.store_failure
  // (what: "event checkpoint_committed", "the commit of step 20"). The job
  // fails with it; never only a log line.
  void NoteStoreFailure(Job& j, const std::string& what, const Status& st);
  void SetState(Job& j, v1::JobState state, const std::string& kind, const std::string& reason);
  // A live-only event (progress) to the job's watchers: not stored.
  void Publish(const v1::JobEvent& ev);
  int64_t AddWatcher(const std::string& job_id, EventSink sink);
  void RemoveWatcher(int64_t watch_id) { watchers_.erase(watch_id); }
  v1::JobStatus StatusOf(const Job& j) const;
  JobRecord RecordOf(const Job& j) const;
  // Authenticates and fences a worker call: the job exists, `id.attempt` is
  // its current attempt, the rank is in range and the token is the attempt's.
  StatusOr<Job*> CheckWorker(const v1::WorkerId& id, const std::string& token);
  // Called by each health check, heartbeat and liveness pulse: after a
  // blackout longer than stall_forgive_s, moves every live rank's clocks
  // forward by it.
  void NoteAlive(int64_t now);

 private:
  struct Watcher {
    std::string job_id;
    EventSink sink;
  };

  const JobManagerOptions& opts_;
  StateStore* store_;
  const sched::HostAllocator* alloc_ = nullptr;  // the scheduler's; read under mu_
  std::mutex mu_;
  Jobs jobs_;                            // guarded by mu_
  int64_t next_job_number_ = 1;          // guarded by mu_
  int64_t last_alive_ms_ = 0;            // guarded by mu_; the last NoteAlive
  std::map<int64_t, Watcher> watchers_;  // guarded by mu_
  int64_t next_watch_id_ = 1;            // guarded by mu_
};

}  // namespace shardd
