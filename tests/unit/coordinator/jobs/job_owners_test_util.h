// The owners of coordinator/jobs/ built straight over the fixture of
// coordinator_test_util.h (a real StateStore in a scratch dir, a fake clock,
// the fake launcher), without the JobManager facade: a test calls the owner of
// what it checks — JobSubmission to submit or cancel, ControlLoop to tick,
// WorkerGateway for a worker's call, WorkerKv for the rendezvous, JobQueries
// to read, JobRecovery after a coordinator restart (NewOwners over the same
// store) — and sees each owner's seam, not the facade's forwarding.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/jobs/attempt_lifecycle.h"
#include "coordinator/jobs/attempt_runner.h"
#include "coordinator/jobs/control_loop.h"
#include "coordinator/jobs/job_queries.h"
#include "coordinator/jobs/job_recovery.h"
#include "coordinator/jobs/job_scheduler.h"
#include "coordinator/jobs/job_submission.h"
#include "coordinator/jobs/job_table.h"
#include "coordinator/jobs/worker_gateway.h"
#include "coordinator/jobs/worker_kv.h"
#include "coordinator/rendezvous/rendezvous_store.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {

// One coordinator's owners over one job table, each given the parts it
// needs (as the daemon wires them); a test reaches each by name.
struct JobOwners {
  JobOwners(JobManagerOptions o, StateStore* store, Launcher* launcher)
      : opts(std::move(o)),
        table(opts, store),
        sched(opts, &table),
        runner(&table),
        attempts(opts, &table, &runner, &sched, &rendezvous),
        loop(opts, &table, &runner, &attempts, &sched, &rendezvous),
        gateway(opts, &table, &attempts, &runner, &rendezvous),
        kv(&table, &rendezvous),
        submission(opts, &table, &runner, &sched, &attempts),
        recovery(opts, &table, &runner, &sched),
        queries(opts, &table) {
    table.set_allocator(sched.allocator());
    if (launcher) runner.AddLauncher(launcher);
  }
  ~JobOwners() { loop.Stop(); }

  JobManagerOptions opts;
  RendezvousStore rendezvous;
  JobTable table;
  JobScheduler sched;
  AttemptRunner runner;
  AttemptLifecycle attempts;
  ControlLoop loop;
  WorkerGateway gateway;
  WorkerKv kv;
  JobSubmission submission;
  JobRecovery recovery;
  JobQueries queries;
};

class JobOwnersTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorTest::SetUp();
    if (HasFatalFailure()) return;
    owners_ = NewOwners(&launcher_);
  }
  void TearDown() override {
    owners_.reset();
    store_.reset();
    ScratchTest::TearDown();
  }
  // A (restarted) coordinator's owners over the fixture's store.
  std::unique_ptr<JobOwners> NewOwners(Launcher* launcher, JobManagerOptions o = {}) {
    return std::make_unique<JobOwners>(Options(std::move(o)), store_.get(), launcher);
  }

  StatusOr<v1::JobStatus> DoSubmit(const v1::JobSpec& spec) override { return owners_->submission.Submit(spec); }
  void DoTick() override { owners_->loop.Tick(); }
  StatusOr<v1::JobStatus> DoGet(const std::string& id) override { return owners_->queries.Get(id); }
  StatusOr<std::vector<v1::JobEvent>> DoEvents(const std::string& id, int64_t after_seq) override {
    return owners_->queries.Events(id, after_seq);
  }
  StatusOr<v1::RegisterResponse> DoRegister(const v1::RegisterRequest& req, const std::string& token) override {
    return owners_->gateway.Register(req, token);
  }
  StatusOr<v1::HeartbeatResponse> DoHeartbeat(const v1::HeartbeatRequest& req, const std::string& token) override {
    return owners_->gateway.Heartbeat(req, token);
  }
  Status DoReportDone(const v1::ReportDoneRequest& req, const std::string& token) override {
    return owners_->gateway.ReportDone(req, token);
  }
  StatusOr<v1::ReportCheckpointResponse> DoReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                                            const std::string& token) override {
    return owners_->gateway.ReportCheckpoint(req, token);
  }

  std::unique_ptr<JobOwners> owners_;
};

// Checkpoint reports of the "tiny" job's 2 ranks (shard 0: 100 bytes, shard
// 1: 120) to the gateway, for the commit and what a restart makes of it.
class CheckpointReportTest : public JobOwnersTest {
 protected:
  std::string StepDir(int64_t step) const { return workdir_ + "/ckpt/tiny/" + shard::StepDirName(step); }
  // Writes both shard files of `step` (shard 0: 100 bytes, shard 1: 120).
  void WriteShards(int64_t step) {
    for (int sr = 0; sr < 2; ++sr)
      WriteBytes(StepDir(step) + "/" + shard::ShardFileName(sr, 2), std::string(100 + 20 * sr, 'a'));
  }
  StatusOr<v1::ReportCheckpointResponse> Report(const std::string& id, int attempt, int rank, int64_t step,
                                                const std::string& step_dir, const std::string& token,
                                                const std::vector<v1::StepMetric>& metrics = {}) {
    // Global batch 4: a manifest must be in range (issue 18 item 2).
    v1::ReportCheckpointRequest req = TinyShardReport(id, attempt, rank, step, step_dir, 100 + 20 * rank, 4);
    for (const auto& m : metrics) *req.add_metrics() = m;
    return owners_->gateway.ReportCheckpoint(req, token);
  }
};

}  // namespace shardd::testing
