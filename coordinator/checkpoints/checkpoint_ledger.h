// The checkpoint owner of one job: every checkpoint fact the coordinator
// holds about it — the commit table (CheckpointCommitter), what the current
// attempt resumes from, the per-host memory tier's committed steps (newest
// and fallbacks, in memory only), the memory folder as stored with the job,
// the commit counters and histogram, and which once-per-attempt checkpoint
// events were said. The rooms of coordinator/jobs/ ask it; none of them keeps
// a checkpoint field of its own (issue 40 item 1).
//
//   report   Add (a rank's shard), then Committed (the step it completed)
//   plan     BeginAttempt (the disk/local choice), PlanMemoryResume (a newer
//            per-host memory step), then Plan(): the one ResumePlan every
//            worker of the attempt is handed (RegisterResponse.resume_plan)
//   restart  Restore (what the state store kept: the memory folder, whether
//            it was removed); the per-host memory steps are not stored, so
//            the next attempt resumes from disk
//   list     resume_from, memory_step, memory_manifest, memory_step_dir,
//            commit_seconds, committed
//
// Thread-safety: not thread-safe. Each Job holds one; JobTable's lock guards
// it like every other part of the Job.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/checkpoints/checkpoint_committer.h"
#include "coordinator/telemetry/telemetry.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/resume_plan.h"
#include "shard/common/status.h"

namespace shardd {

class CheckpointLedger {
 public:
  CheckpointLedger() = default;
  // Submission and recovery: the disk tier keeps `keep_last` steps, the
  // memory tier `memory_keep_last` (its fallbacks are bounded by it).
  void Init(int keep_last, int memory_keep_last);
  bool initialized() const { return committer_ != nullptr; }
  int keep_last() const { return committer_ ? committer_->keep_last() : 0; }

  // ---- reconcile after a coordinator restart ----
  // What the state store kept of the job (jobs.memory_dir and
  // memory_tier_removed). The per-host memory steps are not stored: the next
  // attempt resumes from disk. The "resumed" event of an attempt the store
  // already holds is MarkResumedEvent's.
  void Restore(std::string memory_dir, bool memory_tier_removed) {
    memory_dir_ = std::move(memory_dir);
    memory_tier_removed_ = memory_tier_removed;
  }

  // ---- the memory tier's job folder, as stored with the job ----
  // "" = the rule's folder (MemoryTierDirOf computes it).
  const std::string& stored_memory_dir() const { return memory_dir_; }
  void set_stored_memory_dir(std::string dir) { memory_dir_ = std::move(dir); }
  // The ended job's folder was removed (or there was none): stored, so a
  // coordinator restart removes it once only.
  bool memory_tier_removed() const { return memory_tier_removed_; }
  void set_memory_tier_removed(bool removed) { memory_tier_removed_ = removed; }

  // ---- attempt lifecycle ----
  // A new attempt resumes from `resume` (the control loop's choice: a step
  // folder, or "" = scratch; "auto" only for a peft: job), this_run_only
  // when auto or a restart chose it (the trainer checks the step is this
  // run's): forgets the last attempt's partial steps and its resume plan.
  // Returns the step the attempt resumes at (0 for anything but a step_N
  // folder).
  int64_t BeginAttempt(const std::string& resume, bool this_run_only = false);
  const std::string& resume_from() const { return resume_from_; }
  // After BeginAttempt: a per-host memory step newer than `disk_step` (-1 =
  // none) was committed in this coordinator; the attempt resumes from it (its
  // older memory steps newer than disk_step as fallbacks, then resume_from).
  // Returns the number of fallbacks, or -1 when no such memory step is held.
  int PlanMemoryResume(int64_t disk_step);
  // The attempt's resume plan, as every worker is handed it: resume_from the
  // step chosen or "none" (scratch); "" only when this coordinator chose
  // nothing for the attempt (it adopted it after a restart). memory_dir and
  // per_host are the job's tier (MemoryTierDirOf / MemoryTierPerHost),
  // ended_dirs the folders a per-host worker removes.
  shard::ResumePlan Plan(const std::string& memory_dir, bool per_host,
                         std::vector<std::string> ended_dirs) const;

  // ---- reports ----
  // Records a rank's shard (`now`: for the commit histogram). The committed
  // manifest when this report completed its step, nullopt while shards are
  // missing (CheckpointCommitter::Add).
  shard::StatusOr<std::optional<shard::Manifest>> Add(const ShardReport& report, int64_t now);
  // The step `done` (of the report `rep`) committed at `now`: counted and
  // timed; a per-host memory step becomes the newest the next attempt may
  // resume from (the previous one a fallback).
  void Committed(const ShardReport& rep, const shard::Manifest& done, int64_t now);
  // A rank skipped memory step `step`: true the first time a step as new is
  // said (one memory_step_skipped event per step, whichever ranks skip it).
  bool NoteMemorySkipped(int64_t step);

  // ---- once-per-attempt events ----
  // True once per attempt: the workers' resume fallbacks / "resumed" event.
  bool TakeResumeEvents(int attempt);
  bool TakeResumedEvent(int attempt);
  // Recovery: the stored events already said "resumed" for `attempt`.
  void MarkResumedEvent(int attempt) { resumed_event_attempt_ = attempt; }

  // ---- list ----
  int64_t memory_step() const { return memory_step_; }
  const std::string& memory_manifest() const { return memory_manifest_; }
  const std::string& memory_step_dir() const { return memory_step_dir_; }
  const std::string& resume_memory_manifest() const { return resume_memory_manifest_; }
  const std::vector<std::string>& resume_memory_fallbacks() const { return resume_memory_fallbacks_; }
  const Histogram& commit_seconds() const { return commit_hist_; }
  int64_t committed() const { return committed_; }

 private:
  std::unique_ptr<CheckpointCommitter> committer_;
  int memory_keep_last_ = 0;
  std::string resume_from_;
  bool this_run_only_ = false;
  // BeginAttempt ran in this coordinator. A restarted coordinator adopting an
  // attempt begun by the previous one (a rank still to register) did not
  // choose: its plan leaves checkpoint.resume to the job file, which the
  // trainer resolves with the same chooser.
  bool chosen_ = false;
  std::string memory_dir_;
  bool memory_tier_removed_ = false;
  // The per-host memory tier: its newest committed step (Manifest JSON with
  // every file), rank 0's host folder's copy, and the committed steps before
  // it, newest first (at most memory_keep_last_). In memory only.
  std::string memory_manifest_;
  int64_t memory_step_ = -1;
  std::string memory_step_dir_;
  std::vector<std::pair<int64_t, std::string>> memory_fallbacks_;
  // What the current attempt resumes from in that tier ("" = disk or none).
  std::string resume_memory_manifest_;
  std::vector<std::string> resume_memory_fallbacks_;
  int64_t memory_skipped_step_ = -1;
  int resume_events_attempt_ = 0;
  int resumed_event_attempt_ = 0;
  Histogram commit_hist_{CommitBuckets()};
  int64_t committed_ = 0;                         // since this coordinator started
  std::map<int64_t, int64_t> first_report_ms_;  // step -> its first rank report
};

}  // namespace shardd
