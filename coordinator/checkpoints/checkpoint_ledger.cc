// A job's checkpoint owner (checkpoint_ledger.h).
#include "coordinator/checkpoints/checkpoint_ledger.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "shard/ckpt/catalog.h"

namespace shardd {

void CheckpointLedger::Init(int keep_last, int memory_keep_last) {
  committer_ = std::make_unique<CheckpointCommitter>(keep_last);
  memory_keep_last_ = std::max(0, memory_keep_last);
}

int64_t CheckpointLedger::BeginAttempt(const std::string& resume, bool this_run_only) {
  first_report_ms_.clear();  // an older attempt's uncommitted reports time nothing now
  if (committer_) committer_->Reset();
  resume_from_ = resume;
  this_run_only_ = this_run_only;
  chosen_ = true;
  resume_memory_manifest_.clear();  // PlanMemoryResume sets it when a memory step wins
  resume_memory_fallbacks_.clear();
  const std::string base = std::filesystem::path(resume_from_).filename().string();
  return base.rfind("step_", 0) == 0 ? std::atoll(base.c_str() + 5) : 0;
}

int CheckpointLedger::PlanMemoryResume(int64_t disk_step) {
  if (memory_step_ < 0 || memory_step_ <= disk_step) return -1;
  resume_memory_manifest_ = memory_manifest_;
  resume_memory_fallbacks_.clear();
  for (const auto& [step, manifest] : memory_fallbacks_)
    if (step > disk_step) resume_memory_fallbacks_.push_back(manifest);
  return static_cast<int>(resume_memory_fallbacks_.size());
}

shard::ResumePlan CheckpointLedger::Plan(const std::string& memory_dir, bool per_host,
                                         std::vector<std::string> ended_dirs) const {
  shard::ResumePlan plan;
  plan.resume_from = !chosen_ ? std::string() : resume_from_.empty() ? "none" : resume_from_;
  plan.this_run_only = this_run_only_;
  plan.step = shard::StepOfDirName(std::filesystem::path(resume_from_).filename().string()).value_or(0);
  plan.memory_dir = memory_dir;
  plan.memory_per_host = per_host;
  if (!resume_memory_manifest_.empty()) {
    plan.tier = shard::CheckpointTier::kMemory;
    plan.step = memory_step_;
    plan.memory_manifest = resume_memory_manifest_;
    plan.memory_fallbacks = resume_memory_fallbacks_;
  } else if (!memory_dir.empty() && !per_host && !resume_from_.empty() &&
             std::filesystem::path(resume_from_).parent_path() == std::filesystem::path(memory_dir)) {
    plan.tier = shard::CheckpointTier::kMemory;  // a step of the local memory tier
  }
  if (per_host) plan.ended_memory_dirs = std::move(ended_dirs);
  return plan;
}

shard::StatusOr<std::optional<shard::Manifest>> CheckpointLedger::Add(const ShardReport& report, int64_t now) {
  if (!committer_)
    return shard::FailedPrecondition("checkpoint report of rank " + std::to_string(report.rank) +
                                     ": the job's checkpoint settings were not loaded; not committed");
  first_report_ms_.emplace(report.step, now);
  return committer_->Add(report);
}

void CheckpointLedger::Committed(const ShardReport& rep, const shard::Manifest& done, int64_t now) {
  if (rep.remote) {
    // A per-host memory step: the next attempt may resume from it.
    if (memory_step_ >= 0 && memory_step_ < done.step) {
      memory_fallbacks_.insert(memory_fallbacks_.begin(), {memory_step_, memory_manifest_});
      if (memory_fallbacks_.size() > static_cast<size_t>(memory_keep_last_))
        memory_fallbacks_.resize(memory_keep_last_);
    }
    memory_manifest_ = done.ToJson();
    memory_step_ = done.step;
    memory_step_dir_ = rep.step_dir;
  }
  ++committed_;
  if (auto it = first_report_ms_.find(done.step); it != first_report_ms_.end())
    commit_hist_.Observe((now - it->second) / 1000.0);
  first_report_ms_.erase(first_report_ms_.begin(), first_report_ms_.upper_bound(done.step));
}

bool CheckpointLedger::NoteMemorySkipped(int64_t step) {
  if (step <= memory_skipped_step_) return false;
  memory_skipped_step_ = step;
  return true;
}

bool CheckpointLedger::TakeResumeEvents(int attempt) {
  if (resume_events_attempt_ == attempt) return false;
  resume_events_attempt_ = attempt;
  return true;
}

bool CheckpointLedger::TakeResumedEvent(int attempt) {
  if (resumed_event_attempt_ == attempt) return false;
  resumed_event_attempt_ = attempt;
  return true;
}

}  // namespace shardd
