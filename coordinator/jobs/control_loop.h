// The control loop: one Tick asks the launchers (without the job lock),
// decides under the lock (exits applied, health and timers checked, the local
// queue scheduled), then launches each decided attempt: the resume point is
// resolved (verifying checksums of the newest checkpoint: minutes at 70B)
// without the lock, the attempt begins under it, Launch runs without it, and
// the result is applied under it again only if the job is still in that
// attempt (fencing by attempt number), so a cancel that arrived meanwhile wins.
//
// Start runs Tick every tick_s on one thread and the liveness pulse
// (NoteAlive) on another, so launcher calls that hold up the Ticks never
// look like a stall of the coordinator.
//
// Thread-safety: Tick, NoteAlive, Start and Stop may be called from any thread.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/jobs/attempt_lifecycle.h"
#include "coordinator/jobs/attempt_runner.h"
#include "coordinator/jobs/job_paths.h"
#include "coordinator/jobs/job_scheduler.h"
#include "coordinator/jobs/job_table.h"
#include "coordinator/rendezvous/rendezvous_store.h"

namespace shardd {

// Where a launch resumes (ControlLoop::ChooseResume, off the lock): a step
// folder, or "" = from scratch; the job file's "auto" only for a peft: job.
struct ResumeDecision {
  std::string resume;
  bool this_run_only = false;  // chosen by auto or a restart: the trainer checks it is this run's
  int64_t disk_step = -1;      // a restart's newest good step of this run (-1 = none found)
  std::vector<std::string> skipped;  // the fallbacks, each an event (issue 39 item 6)
  shard::Status refused;       // checkpoint.resume cannot be honoured: the job fails at launch
};

// A launch decided in Tick: the job's next attempt after `prev_attempt`.
struct LaunchPlan {
  std::string job_id;
  int prev_attempt = 0;
  bool find_latest = false;  // resume from the newest good committed step (verified: slow)
  std::string checkpoint_dir;
  std::string memory_dir;  // the memory tier's folder ("" = none): its newer steps win
  int64_t memory_step = -1;  // a per-host tier's newest committed step (-1 = none)
  bool memory_per_host = false;  // the job's memory tier is per host (its commits are in the job only)
  std::string fallback_resume;  // the job file's checkpoint.resume
  // Only this run's steps (or unknown ones) are resumed by a restart: another
  // run that shares the directory never is (shard/spec/run_fingerprint.h).
  std::string run_fingerprint;
  shard::RunKeys run_keys;  // what defines this run (for ChooseResumeStep's notes)
  bool peft = false;        // a peft: job: its adapters' checkpoints are found by its trainer
  // With --allowed-root: the job's paths, checked again at launch (a
  // symlink made after submission must not lead outside the roots).
  std::string src, workdir;
  std::vector<JobPath> confine;
  // An elastic attempt on fewer ranks (elastic_resize.h): its size, checked
  // by the planner before it is used, and the job as the planner reads it
  // (model.from_hf against the workdir). 0 = all ranks.
  int world = 0;
  shard::JobConfig config;
  // An elastic restart sized by its launcher first (elastic_launched.h
  // SizeRestart): asked off the lock, with what the launch would carry.
  Launcher* capacity_launcher = nullptr;
  LaunchRequest capacity_req;
};

class ControlLoop {
 public:
  ControlLoop(const JobManagerOptions& opts, JobTable* table, AttemptRunner* runner, AttemptLifecycle* attempts,
              JobScheduler* sched, RendezvousStore* rendezvous)
      : opts_(opts), table_(table), runner_(runner), attempts_(attempts), sched_(sched), rendezvous_(rendezvous) {}
  ~ControlLoop() { Stop(); }

  void Start();
  void Stop();
  // One pass: launcher exits, health, timers, launches.
  void Tick();
  // Takes the job lock to note that the coordinator is alive.
  void NoteAlive();

 private:
  // Applies what the launchers said, checks health and timers; returns the
  // launches to make. With the table's lock held.
  std::vector<LaunchPlan> Decide(const LauncherView& view);
  void CheckRunning(Job& j, const LauncherView& view, int64_t now);
  LaunchPlan PlanLaunch(const Job& j) const;
  // The id of a job not ended whose memory folder is `dir`, inside it or
  // above it ("" = none). Under the lock.
  std::string LiveJobUsing(const std::string& dir) const;
  // Removes the folders Decide found and records each (Tick, off the lock).
  void RemoveEndedMemoryTiers();
  // Resolves the resume point, starts the attempt and launches it (takes the lock itself).
  void RunLaunch(LaunchPlan plan);
  // The resume's fallbacks as events: each step skipped, and a restart that
  // starts from step 0 with the reason. Under the lock, once per attempt.
  void SayResumeFallbacks(Job& j, const LaunchPlan& plan, const std::vector<std::string>& skipped,
                          int64_t found_step);
  // The attempt's resume, chosen once for every worker (issue 40 item 2): a
  // restart's newest good step of this run (none found: from step 0, or the
  // step folder the job file names); a first attempt's checkpoint.resume
  // through shard::ChooseResumeStep, the chooser a standalone worker calls too.
  // Reads and hashes checkpoint files: never under the lock.
  ResumeDecision ChooseResume(const LaunchPlan& plan) const;
  // An elastic attempt's size through the planner (off the lock); a refusal
  // sends the attempt back to full size, said as an event.
  void CheckElasticFit(const LaunchPlan& plan);

  const JobManagerOptions& opts_;
  JobTable* table_;
  AttemptRunner* runner_;
  AttemptLifecycle* attempts_;
  JobScheduler* sched_;
  RendezvousStore* rendezvous_;

  std::thread thread_;
  std::thread pulse_thread_;  // NoteAlive every stall_forgive_s / 4 (at most 1 s)
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  // Ended jobs' memory-tier folders, found in Decide, removed after it
  // without the lock (Tick's thread only), each recorded with an event.
  struct MemoryRemoval {
    std::string job_id;
    std::string dir;
    std::string live_job;  // a job not ended whose folder is this one, inside it or above it: kept
  };
  std::vector<MemoryRemoval> memory_to_remove_;
  bool stop_ = false;  // guarded by stop_mu_
};

}  // namespace shardd
