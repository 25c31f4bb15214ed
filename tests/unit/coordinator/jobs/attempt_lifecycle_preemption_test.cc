// Preemption, whole-allocation exits and launcher availability (AttemptLifecycle
// and, for the refusals, JobSubmission; over the owners of job_owners_test_util.h). When every
// rank reports it stopped on its launcher's signal after a checkpoint, the
// attempt ends as "preempted" without charging a restart, and the next attempt
// starts after the backoff. Cluster launchers report their allocation's end as
// one RankExit::kAllRanks: harmless after success, code 2 fails the job, any
// other end restarts it with the launcher's words. An allocation waiting in
// its cluster's queue has no registration deadline. A job naming a launcher the
// coordinator lacks, or one that cannot run now, is refused at submission.
#include <gtest/gtest.h>

#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

class PreemptionTest : public JobOwnersTest {
 protected:
  Status ReportPreempted(const std::string& id, int rank, int64_t step = 40) {
    v1::ReportFailureRequest req;
    *req.mutable_id() = Worker(id, Get(id).attempt(), rank);
    req.set_error("SIGUSR1 from slurm: checkpointed step " + std::to_string(step));
    req.set_retryable(true);
    req.set_preempted(true);
    req.set_step(step);
    return owners_->gateway.ReportFailure(req, TokenOf(id, Get(id).attempt()));
  }
  std::vector<v1::JobEvent> Events(const std::string& id) {
    std::vector<v1::JobEvent> past;
    auto w = owners_->queries.Watch(id, 0, [](const v1::JobEvent&) {}, &past);
    EXPECT_TRUE(w.ok());
    if (w.ok()) owners_->queries.Unwatch(*w);
    return past;
  }
  int CountEvents(const std::string& id, const std::string& kind) {
    int n = 0;
    for (const auto& e : Events(id)) n += e.kind() == kind;
    return n;
  }
};

TEST_F(PreemptionTest, EveryRankPreemptedRestartsWithoutChargingARestart) {
  const std::string id = StartRunningJob();
  ASSERT_TRUE(ReportPreempted(id, 0).ok());
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RUNNING) << "one preempted rank ended the attempt";
  EXPECT_EQ(Get(id).workers(0).state(), "preempted");

  ASSERT_TRUE(ReportPreempted(id, 1).ok());
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RESTARTING);
  EXPECT_EQ(s.restarts(), 0);
  EXPECT_EQ(s.progress().preemptions(), 1);
  EXPECT_EQ(Events(id).back().kind(), "preempted");
  EXPECT_TRUE(Contains(s.reason(), "step 40")) << s.reason();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/false), 1);

  launcher_.SetRunning(id, 1, 0);
  Advance(2);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING) << "relaunched before restart.backoff_s";
  Advance(1);
  owners_->loop.Tick();
  s = Get(id);
  EXPECT_EQ(s.state(), v1::LAUNCHING);
  EXPECT_EQ(s.attempt(), 2);
  EXPECT_EQ(s.restarts(), 0);
  ASSERT_EQ(launcher_.launches.size(), 2u);
  EXPECT_EQ(launcher_.launches[1].attempt, 2);
}

// Preemptions do not use up max_restarts (2 here).
TEST_F(PreemptionTest, RepeatedPreemptionsNeverExhaustTheRestartBudget) {
  const std::string id = StartRunningJob();
  for (int attempt = 1; attempt <= 4; ++attempt) {
    ASSERT_EQ(Get(id).attempt(), attempt);
    ASSERT_TRUE(ReportPreempted(id, 0).ok());
    ASSERT_TRUE(ReportPreempted(id, 1).ok());
    ASSERT_EQ(State(id), v1::RESTARTING);
    launcher_.SetRunning(id, attempt, 0);
    Advance(3);
    owners_->loop.Tick();
    RegisterAll(id);
  }
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RUNNING) << s.reason();
  EXPECT_EQ(s.restarts(), 0);
  EXPECT_EQ(s.progress().preemptions(), 4);
}

TEST_F(PreemptionTest, APreemptedRanksExitIsNoFailureButAnothersIs) {
  const std::string id = StartRunningJob();
  ASSERT_TRUE(ReportPreempted(id, 0).ok());
  launcher_.Exit(id, 1, 0, /*exit_code=*/5);
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RUNNING) << s.reason();
  EXPECT_EQ(s.restarts(), 0);
  EXPECT_EQ(s.workers(0).state(), "preempted");

  launcher_.Exit(id, 1, 1, /*exit_code=*/1);
  owners_->loop.Tick();
  s = Get(id);
  EXPECT_EQ(s.state(), v1::RESTARTING);
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_EQ(s.progress().preemptions(), 0);
  EXPECT_TRUE(Contains(s.reason(), "rank 1 exited with code 1")) << s.reason();
}

TEST_F(PreemptionTest, AllocationEndingAfterSuccessIsNoFailure) {
  const std::string id = StartRunningJob();
  ASSERT_TRUE(ReportDone(id, 1, 0, TokenOf(id, 1)).ok());
  ASSERT_TRUE(ReportDone(id, 1, 1, TokenOf(id, 1)).ok());
  ASSERT_EQ(State(id), v1::SUCCEEDED);
  const std::string reason = Reason(id);
  launcher_.ExitAll(id, 1, 0);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::SUCCEEDED);
  EXPECT_EQ(Reason(id), reason);
  EXPECT_EQ(CountEvents(id, "failed"), 0);
  EXPECT_EQ(CountEvents(id, "restarting"), 0);
}

TEST_F(PreemptionTest, AllocationExitingWithCodeTwoFailsTheJobForGood) {
  const std::string id = StartRunningJob();
  launcher_.ExitAll(id, 1, 2);
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::FAILED);
  EXPECT_EQ(s.restarts(), 0);
  EXPECT_TRUE(Contains(s.reason(), "the workers exited with code 2")) << s.reason();
  EXPECT_TRUE(Contains(s.reason(), "not retryable")) << s.reason();
  EXPECT_TRUE(Contains(s.reason(), "attempt_1")) << "no pointer to the logs: " << s.reason();
  EXPECT_EQ(s.workers(0).state(), "failed");
  EXPECT_EQ(s.workers(1).state(), "failed");
}

TEST_F(PreemptionTest, AllocationEndingMidRunRestartsInTheLaunchersWords) {
  const std::string id = StartRunningJob();
  launcher_.ExitAll(id, 1, -1, "slurm job 7 TIMEOUT");
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RESTARTING);
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_TRUE(Contains(s.reason(), "slurm job 7 TIMEOUT")) << s.reason();

  // An exit of an attempt that already ended changes nothing.
  launcher_.ExitAll(id, 1, 2);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_EQ(Get(id).restarts(), 1);
}

TEST_F(PreemptionTest, AllocationEndingBeforeEveryRankReportedIsAFailure) {
  const std::string id = StartRunningJob();
  ASSERT_TRUE(ReportPreempted(id, 0).ok());
  launcher_.ExitAll(id, 1, 5, "slurm job 7 CANCELLED");
  owners_->loop.Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RESTARTING);
  EXPECT_EQ(s.restarts(), 1) << "a rank that never said it checkpointed was treated as preempted";
  EXPECT_EQ(s.progress().preemptions(), 0);
  EXPECT_EQ(s.workers(0).state(), "preempted");
  EXPECT_EQ(s.workers(1).state(), "failed");
}

// A busy cluster may queue an attempt for hours: the registration clock
// starts when the allocation does, not at sbatch.
TEST_F(PreemptionTest, AnAllocationWaitingInTheQueueHasNoRegistrationDeadline) {
  FakeLauncher slurm("slurm");
  owners_->runner.AddLauncher(&slurm);
  auto st = owners_->submission.Submit(Spec(JobYaml(), {"resources.launcher=slurm"}));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const std::string id = st->id();
  owners_->loop.Tick();
  ASSERT_EQ(slurm.launches.size(), 1u);
  slurm.pending.insert({id, 1});
  for (int i = 0; i < 10; ++i) {
    Advance(kRegisterTimeoutS);
    owners_->loop.Tick();
  }
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  EXPECT_EQ(Get(id).restarts(), 0);

  slurm.pending.clear();  // the allocation starts
  Advance(kRegisterTimeoutS - 1);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  Advance(2);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "did not register")) << Reason(id);
  owners_.reset();  // before `slurm` goes
}

// The coordinator restarts while the attempt still waits in the queue: its
// ranks never ran, so they are not held to heartbeats they never sent.
TEST_F(PreemptionTest, AQueuedAttemptSurvivesACoordinatorRestart) {
  FakeLauncher slurm("slurm");
  owners_->runner.AddLauncher(&slurm);
  auto st = owners_->submission.Submit(Spec(JobYaml(), {"resources.launcher=slurm"}));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const std::string id = st->id();
  owners_->loop.Tick();
  const std::string token = slurm.launches.at(0).env.at("SHARDD_WORKER_TOKEN");
  owners_.reset();

  FakeLauncher slurm2("slurm");
  slurm2.pending.insert({id, 1});
  owners_ = NewOwners(&launcher_);
  owners_->runner.AddLauncher(&slurm2);
  ASSERT_TRUE(owners_->recovery.Recover().ok());
  for (int i = 0; i < 5; ++i) {
    Advance(kRegisterTimeoutS);
    owners_->loop.Tick();
  }
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);

  slurm2.pending.clear();  // the allocation starts; the workers register
  Advance(1);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  ASSERT_TRUE(Register(id, 1, 0, token).ok());
  ASSERT_TRUE(Register(id, 1, 1, token).ok());
  EXPECT_EQ(State(id), v1::RUNNING);
  Advance(5);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
  EXPECT_EQ(Get(id).restarts(), 0);
  owners_.reset();  // before `slurm2` goes
}

TEST_F(PreemptionTest, MissingLauncherIsRefusedNamingWhatTheCoordinatorHas) {
  auto st = owners_->submission.Submit(Spec(JobYaml(), {"resources.launcher=slurm"}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(st.status().message(), "'slurm'")) << st.status().ToString();
  EXPECT_TRUE(Contains(st.status().message(), "local, external")) << st.status().ToString();
}

TEST_F(PreemptionTest, UnavailableLauncherIsRefusedWithItsOwnError) {
  FakeLauncher slurm("slurm");
  slurm.available = shard::FailedPrecondition("the slurm launcher cannot run sbatch here: no such file");
  owners_->runner.AddLauncher(&slurm);
  auto st = owners_->submission.Submit(Spec(JobYaml(), {"resources.launcher=slurm"}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st.status().message(), "cannot run sbatch here: no such file")) << st.status().ToString();
  EXPECT_TRUE(Contains(st.status().message(), "jobs/tiny.yaml")) << st.status().ToString();
  EXPECT_TRUE(owners_->queries.List(true).empty());

  slurm.available = shard::OkStatus();
  auto ok = owners_->submission.Submit(Spec(JobYaml(), {"resources.launcher=slurm", "resources.slurm.partition=debug"}));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  owners_->loop.Tick();
  EXPECT_TRUE(launcher_.launches.empty()) << "the local launcher got a slurm job";
  ASSERT_EQ(slurm.launches.size(), 1u);
  EXPECT_EQ(slurm.launches[0].resources.launcher, shard::Launcher::kSlurm);
  EXPECT_EQ(slurm.launches[0].resources.slurm.partition, "debug");
  EXPECT_EQ(slurm.launches[0].job_name, "tiny");
  EXPECT_EQ(State(ok->id()), v1::LAUNCHING);
  owners_.reset();  // before `slurm` goes
}

}  // namespace
}  // namespace shardd::testing
