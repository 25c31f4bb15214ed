// The worker gateway: the WorkerService's calls — join (launcher: external),
// register, heartbeat, checkpoint reports, done and failure — each
// authenticated and fenced by the job table (JobTable::CheckWorker), so two
// generations of workers never train at once. The rendezvous store the
// workers meet in is the facade's; an attempt's keys go when it ends.
//
// Thread-safety: every public method is thread-safe (takes the table's lock).
// Checkpoint retention (deleting hundreds of GB can take seconds) and the
// Terminates a failure queues run after the lock is let go.
#pragma once

#include <string>

#include "coordinator/jobs/attempt_lifecycle.h"
#include "coordinator/jobs/attempt_runner.h"
#include "coordinator/jobs/job_table.h"
#include "coordinator/rendezvous/rendezvous_store.h"

namespace shardd {

class WorkerGateway {
 public:
  WorkerGateway(const JobManagerOptions& opts, JobTable* table, AttemptLifecycle* attempts, AttemptRunner* runner,
                RendezvousStore* rendezvous)
      : opts_(opts), table_(table), attempts_(attempts), runner_(runner), rendezvous_(rendezvous) {}

  Status CheckWorker(const v1::WorkerId& id, const std::string& token);
  StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& req, const std::string& join_token);
  StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& req, const std::string& token);
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req, const std::string& token);
  StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                                          const std::string& token);
  Status ReportDone(const v1::ReportDoneRequest& req, const std::string& token);
  Status ReportFailure(const v1::ReportFailureRequest& req, const std::string& token);

 private:
  // A committed step whose older steps retention may now delete (off the lock).
  struct RetentionTask {
    bool due = false;
    std::string step_dir;
    std::string run_fingerprint;
    int keep_last = 0;  // of the step's tier
    shard::CheckpointTier tier = shard::CheckpointTier::kDisk;
    int64_t step = 0;
    std::string memory_dir;  // the job's memory tier ("" = none)
  };
  StatusOr<v1::ReportCheckpointResponse> ReportCheckpointLocked(const v1::ReportCheckpointRequest& req,
                                                                const std::string& token, RetentionTask* retain);
  Status ReportFailureLocked(const v1::ReportFailureRequest& req, const std::string& token);
  // A report's step folder: inside the job's folder of its tier, not a link,
  // confined to the allowed roots, named step_N.
  Status CheckStepDir(const Job& j, const ShardReport& rep, const std::string& memory_dir, int64_t step) const;
  // A per-host memory step's folder: <memory root>/host-*/step_N (only its
  // path: the coordinator cannot see that host's tmpfs).
  Status CheckPerHostStepDir(const Job& j, const std::string& step_dir, int64_t step, int rank) const;
  // A rank's report that it skipped a memory step (could not write it): one
  // memory_step_skipped event per step. Called with the table lock held.
  StatusOr<v1::ReportCheckpointResponse> MemoryStepSkipped(Job& j, const v1::ReportCheckpointRequest& req,
                                                           shard::CheckpointTier tier);
  // Stores rank 0's per-step metrics (from a heartbeat or a checkpoint report)
  // and updates the job's live progress for watchers. With the lock held.
  void RecordMetrics(Job& j, const google::protobuf::RepeatedPtrField<v1::StepMetric>& metrics, int64_t now);
  // The memory folders of ended per-host jobs under j's memory root, newest
  // first, at most 16 (RegisterResponse.ended_memory_dirs). Under the lock.
  std::vector<std::string> EndedPerHostMemoryDirs(const Job& j) const;
  // Feeds rank `rank`'s compute seconds per step (every rank's heartbeat, rank
  // 0's checkpoint report) to the job's StragglerDetector and announces each
  // change as an event. With the lock held; a few microseconds per row.
  void NoteComputeTimes(Job& j, int rank, const google::protobuf::RepeatedPtrField<v1::StepMetric>& metrics);

  const JobManagerOptions& opts_;
  JobTable* table_;
  AttemptLifecycle* attempts_;
  AttemptRunner* runner_;
  RendezvousStore* rendezvous_;
};

}  // namespace shardd
