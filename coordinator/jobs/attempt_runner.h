// The attempt runner: every call into a launcher — launch, observe (exits,
// queue state, what still runs), adopt, terminate — and never one under the
// job lock (sbatch, kubectl and scontrol can take seconds). Work decided under
// the lock is queued here (QueueTerminate) and carried out after it is let go.
//
// Thread-safety: launchers are not thread-safe, so every launcher call but
// CheckAvailable (Submit's, from RPC threads) is made with serial() held; it is
// taken before the table's lock, never while holding it. The terminate queue
// is guarded by the table's lock.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/jobs/job_table.h"
#include "coordinator/launchers/launcher.h"

namespace shardd {

// What the launchers said in one Tick, asked without the job lock.
struct LauncherView {
  std::vector<RankExit> exits;                          // signalled ones first
  std::map<std::pair<std::string, int>, int> running;   // (job, attempt) -> Running()
  std::map<std::pair<std::string, int>, std::string> pending;  // Pending() attempts -> PendingReason()
  // Elastic jobs a resize may help (elastic_launched.h): (job, attempt) -> Capacity().
  std::map<std::pair<std::string, int>, StatusOr<int>> capacity;
};

class AttemptRunner {
 public:
  explicit AttemptRunner(JobTable* table) : table_(table) {}
  // Before Recover/Start. Replaces any launcher of the same name.
  void AddLauncher(Launcher* launcher);
  // By name(); null when this coordinator has none. Set before Start: read without a lock.
  Launcher* Find(const std::string& name) const;
  const std::map<std::string, Launcher*>& launchers() const { return launchers_; }
  // Serializes the control loop and every launcher call. Taken before the table's lock.
  std::mutex& serial() { return tick_mu_; }

  // ---- with serial() held, the table's lock not held ----
  // Asks the launchers about exits and the attempts named under the table's
  // lock (`now` on the control loop's clock).
  LauncherView Observe(int64_t now);
  // One launch (sbatch / kubectl apply / fork+exec).
  StatusOr<std::vector<int>> Launch(Launcher* launcher, const LaunchRequest& req, int attempt);
  // Makes the queued Terminate calls.
  void RunTerminates();

  // ---- with the table's lock held ----
  // Queues a launcher Terminate of the job's attempt for RunTerminates.
  void QueueTerminate(const Job& j, int attempt, bool force);

  // From an RPC thread (no lock held): runs the queued Terminates now unless a
  // Tick is busy (it runs them when it is done), so an RPC never waits for a launch.
  void TryRunTerminates();

 private:
  struct TerminateCall {
    Launcher* launcher = nullptr;
    std::string job_id;
    int attempt = 0;
    bool force = false;
  };

  JobTable* table_;
  std::map<std::string, Launcher*> launchers_;  // by name(); set before Start
  std::mutex tick_mu_;
  std::vector<TerminateCall> terminates_;  // guarded by the table's lock
};

}  // namespace shardd
