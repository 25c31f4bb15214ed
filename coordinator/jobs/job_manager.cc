// The JobManager facade (job_manager.h): builds the parts of coordinator/jobs/
// over one options struct and one job table.
#include "coordinator/jobs/job_manager.h"

#include <chrono>

namespace shardd {
namespace {

int64_t SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

JobManagerOptions WithClock(JobManagerOptions opts) {
  if (!opts.now_ms) opts.now_ms = SystemNowMs;
  return opts;
}

}  // namespace

JobManager::JobManager(JobManagerOptions opts, StateStore* store, Launcher* launcher)
    : opts_(WithClock(std::move(opts))),
      table_(opts_, store),
      sched_(opts_, &table_),
      runner_(&table_),
      attempts_(opts_, &table_, &runner_, &sched_, &rendezvous_),
      loop_(opts_, &table_, &runner_, &attempts_, &sched_, &rendezvous_),
      gateway_(opts_, &table_, &attempts_, &runner_, &rendezvous_),
      kv_(&table_, &rendezvous_),
      submission_(opts_, &table_, &runner_, &sched_, &attempts_),
      recovery_(opts_, &table_, &runner_, &sched_),
      queries_(opts_, &table_) {
  table_.set_allocator(sched_.allocator());
  if (launcher) AddLauncher(launcher);
}

JobManager::~JobManager() { Stop(); }

}  // namespace shardd
