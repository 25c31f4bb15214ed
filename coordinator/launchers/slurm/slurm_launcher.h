// The Slurm backend: one sbatch job per attempt (`srun shardd-worker`, one
// task per rank), watched with `scontrol show job` (sacct when the job has
// left slurmctld's memory), ended with scancel. Every Slurm command goes
// through RunCommand with the paths in SlurmLauncherOptions, so tests can
// point them elsewhere.
//
// Outcomes: Slurm sees the allocation, not the ranks, so an ended job is
// reported as RankExit::kAllRanks with the batch script's exit code (the
// highest of the workers': 2 = bad input, 5 = preempted after a checkpoint)
// and, for states other than COMPLETED/FAILED, the state in words. A job that
// Slurm requeued by itself (node failure, preemption with --requeue) is
// reported as ended too: the coordinator starts a new attempt with a new
// token and cancels the requeued one, so two generations never run at once.
// A job is "gone" only when scontrol says "Invalid job id" and sacct does not
// know it either; an unreachable slurmctld is asked again at the next poll
// (the JobManager's heartbeat deadlines still watch the workers meanwhile).
// While the job waits in the queue, Pending() is true: the JobManager does
// not count queue time against the workers' registration deadline.
//
// Polls are rate-limited to resources.slurm.poll_interval_s per attempt, and
// run on the JobManager's thread (scontrol answers in milliseconds from
// slurmctld's memory; each command has a timeout).
//
// Thread-safety: called from the JobManager's thread only, like every Launcher.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/launchers/command.h"
#include "coordinator/launchers/launcher.h"

namespace shardd {

struct SlurmLauncherOptions {
  std::string sbatch = "sbatch";
  std::string scontrol = "scontrol";
  std::string squeue = "squeue";
  std::string scancel = "scancel";
  std::string sacct = "sacct";
  double command_timeout_s = 30;
};

class SlurmLauncher : public Launcher {
 public:
  explicit SlurmLauncher(SlurmLauncherOptions opts = {}) : opts_(std::move(opts)) {}
  const char* name() const override { return "slurm"; }
  // sbatch runs here (checked once a minute at most).
  Status CheckAvailable() override;
  StatusOr<std::vector<int>> Launch(const LaunchRequest& req) override;
  std::vector<RankExit> Poll() override;
  void Terminate(const std::string& job_id, int attempt, bool force) override;
  // Last seen PENDING or CONFIGURING; false while unknown (rate-limited like
  // Poll; an exit it finds waits for Poll).
  bool Pending(const std::string& job_id, int attempt) override;
  std::string PendingReason(const std::string& job_id, int attempt) override;
  int Running(const std::string& job_id, int attempt) override;
  // Free CPUs and GPUs of the partition's usable nodes, in the job's shape
  // (slurm_capacity.h), with req.attempt's own allocation counted as free.
  // Asked at most once per poll_interval_s per job.
  StatusOr<int> Capacity(const LaunchRequest& req) override;
  void Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) override;

  // The Slurm job id of an attempt ("" if unknown); for tests and status.
  std::string SlurmJobId(const std::string& job_id, int attempt) const;

 private:
  struct Attempt {
    std::string slurm_id;
    double poll_interval_s = 2;
    std::chrono::steady_clock::time_point next_poll;
    int restarts_seen = 0;
    bool ran = false;      // seen RUNNING at least once
    bool queued = false;   // last seen waiting for its allocation (PENDING, CONFIGURING)
    std::string queue_reason;  // Slurm's Reason= while queued
    bool ended = false;    // reported (or terminated and gone)
    bool requeued = false; // ended by a requeue: Slurm will run it again unless cancelled
  };
  using Key = std::pair<std::string, int>;
  // Asks Slurm about one job; fills *exit and returns true when it ended.
  bool Check(const Key& key, Attempt& a, RankExit* exit);
  // Checks the attempt if its poll is due; an exit goes to pending_.
  void Refresh(const Key& key, Attempt& a);

  struct CapacityAnswer {
    int attempt = 0;  // the attempt whose places were counted as free
    std::chrono::steady_clock::time_point next;
    StatusOr<int> ranks = 0;
  };
  StatusOr<int> AskCapacity(const LaunchRequest& req);

  SlurmLauncherOptions opts_;
  std::map<Key, Attempt> attempts_;
  std::map<std::string, CapacityAnswer> capacity_;  // by job id
  std::vector<RankExit> pending_;  // exits found, not yet returned by Poll
  CommandCheck available_{"slurm", "sbatch", {opts_.sbatch, "--version"}};  // CheckAvailable's cached answer
};

}  // namespace shardd
