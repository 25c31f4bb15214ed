// The JobManager over the real SlurmLauncher, with the Slurm commands played
// by stand-ins (fake_slurm.h) and the JobManager on its fake clock: a job's
// whole life as Slurm reports it — queued, running, done; a time limit and a
// requeue restart it as a new sbatch job; a preemption does too without
// charging a restart; cancel reaches scancel; an unavailable sbatch refuses
// the submission. (The launcher paces its polls by the real clock, so each
// Tick here comes a few milliseconds after the previous one.)
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "coordinator/launchers/slurm/slurm_launcher.h"
#include "tests/unit/coordinator/launchers/slurm/fake_slurm.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

class SlurmJobTest : public JobManagerTest {
 protected:
  void SetUp() override {
    JobManagerTest::SetUp();
    if (HasFatalFailure()) return;
    slurm_ = std::make_unique<FakeSlurm>(Path("slurm"));
    launcher_slurm_ = std::make_unique<SlurmLauncher>(slurm_->Options());
    manager_->AddLauncher(launcher_slurm_.get());
  }

  std::string SubmitSlurm() {
    auto st = manager_->Submit(Spec(JobYaml(), {"resources.launcher=slurm", "resources.slurm.poll_interval_s=0.001"}));
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->id() : "";
  }
  // Submitted, sbatch'ed, RUNNING in Slurm and every rank registered.
  std::string StartSlurmJob() {
    const std::string id = SubmitSlurm();
    manager_->Tick();
    slurm_->Scontrol("RUNNING");
    for (int r = 0; r < 2; ++r) {
      auto resp = Register(id, 1, r, slurm_->LastSbatchToken());
      EXPECT_TRUE(resp.ok()) << resp.status().ToString();
    }
    EXPECT_EQ(State(id), v1::RUNNING);
    return id;
  }
  void TickLater() {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    manager_->Tick();
  }
  Status Preempted(const std::string& id, int rank, const std::string& token) {
    v1::ReportFailureRequest req;
    *req.mutable_id() = Worker(id, 1, rank);
    req.set_error("SIGUSR1");
    req.set_preempted(true);
    req.set_step(20);
    return manager_->ReportFailure(req, token);
  }

  std::unique_ptr<FakeSlurm> slurm_;
  std::unique_ptr<SlurmLauncher> launcher_slurm_;
  std::unique_ptr<SlurmLauncher> broken_;
};

TEST_F(SlurmJobTest, SucceededJobEndsQuietlyWithItsAllocation) {
  const std::string id = SubmitSlurm();
  manager_->Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING);
  EXPECT_TRUE(launcher_.launches.empty()) << "the local launcher got a slurm job";
  const std::string token = slurm_->LastSbatchToken();
  EXPECT_EQ(token.size(), 48u);
  EXPECT_EQ(launcher_slurm_->SlurmJobId(id, 1), "42");
  EXPECT_TRUE(fs::exists(Path("state/jobs/" + id + "/attempt_1/job.sbatch")));

  slurm_->Scontrol("RUNNING");
  ASSERT_TRUE(Register(id, 1, 0, token).ok());
  ASSERT_TRUE(Register(id, 1, 1, token).ok());
  TickLater();
  EXPECT_EQ(State(id), v1::RUNNING);
  ASSERT_TRUE(ReportDone(id, 1, 0, token).ok());
  ASSERT_TRUE(ReportDone(id, 1, 1, token).ok());
  EXPECT_EQ(State(id), v1::SUCCEEDED);

  slurm_->Scontrol("COMPLETED");
  TickLater();
  EXPECT_EQ(State(id), v1::SUCCEEDED) << Reason(id);
  EXPECT_TRUE(manager_->Drained(id));
  EXPECT_EQ(slurm_->CountCalls("scancel"), 0);
}

TEST_F(SlurmJobTest, TimeLimitRestartsAsANewSlurmJob) {
  const std::string id = StartSlurmJob();
  const std::string first = slurm_->LastSbatchToken();
  slurm_->Scontrol("TIMEOUT", "0:15", 0, "TimeLimit");
  TickLater();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RESTARTING);
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_TRUE(Contains(s.reason(), "slurm job 42 TIMEOUT")) << s.reason();

  slurm_->Answer("sbatch", "43\n");
  Advance(3);
  TickLater();
  s = Get(id);
  EXPECT_EQ(s.state(), v1::LAUNCHING) << s.reason();
  EXPECT_EQ(s.attempt(), 2);
  EXPECT_EQ(launcher_slurm_->SlurmJobId(id, 2), "43");
  EXPECT_NE(slurm_->LastSbatchToken(), first);
  EXPECT_EQ(slurm_->CountCalls("scancel"), 0) << "scancel of a job that had ended";
}

TEST_F(SlurmJobTest, QueueWaitIsNoRegistrationTimeout) {
  const std::string id = SubmitSlurm();
  manager_->Tick();
  slurm_->Scontrol("PENDING", "0:0", 0, "Resources");
  for (int i = 0; i < 5; ++i) {
    Advance(kRegisterTimeoutS);
    TickLater();
  }
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  EXPECT_EQ(Get(id).restarts(), 0);
  // Why it waits is said once, in Slurm's words.
  std::vector<v1::JobEvent> past;
  auto w = manager_->Watch(id, 0, [](const v1::JobEvent&) {}, &past);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  manager_->Unwatch(*w);
  int queued = 0;
  for (const auto& e : past) {
    if (e.kind() != "queued") continue;
    ++queued;
    EXPECT_TRUE(Contains(e.message(), "slurm job 42 PENDING (Resources)")) << e.message();
  }
  EXPECT_EQ(queued, 1) << "announced once, not at every poll";

  slurm_->Scontrol("RUNNING");
  TickLater();
  Advance(kRegisterTimeoutS - 1);
  TickLater();
  EXPECT_EQ(State(id), v1::LAUNCHING) << Reason(id);
  Advance(2);
  TickLater();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "did not register")) << Reason(id);
  EXPECT_EQ(slurm_->Calls("scancel").rfind("argv: [42]\n", 0), 0u) << slurm_->Calls("scancel");
}

TEST_F(SlurmJobTest, CancelReachesScancel) {
  const std::string id = StartSlurmJob();
  ASSERT_TRUE(manager_->Cancel(id, "").ok());
  EXPECT_EQ(State(id), v1::CANCELLED);
  EXPECT_EQ(slurm_->Calls("scancel").rfind("argv: [42]\n", 0), 0u) << slurm_->Calls("scancel");
  EXPECT_FALSE(manager_->Drained(id));
  slurm_->Scontrol("CANCELLED", "0:15");
  TickLater();
  EXPECT_TRUE(manager_->Drained(id));
  EXPECT_EQ(slurm_->CountCalls("scancel"), 1) << slurm_->Calls("scancel");
}

TEST_F(SlurmJobTest, PreemptionCancelsAndResubmitsWithoutARestart) {
  const std::string id = StartSlurmJob();
  const std::string token = slurm_->LastSbatchToken();
  ASSERT_TRUE(Preempted(id, 0, token).ok());
  ASSERT_TRUE(Preempted(id, 1, token).ok());
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_EQ(slurm_->Calls("scancel").rfind("argv: [42]\n", 0), 0u) << slurm_->Calls("scancel");

  slurm_->Scontrol("CANCELLED", "0:15");
  slurm_->Answer("sbatch", "43\n");
  Advance(3);
  TickLater();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::LAUNCHING) << s.reason();
  EXPECT_EQ(s.attempt(), 2);
  EXPECT_EQ(s.restarts(), 0);
  EXPECT_EQ(s.progress().preemptions(), 1);
  EXPECT_EQ(launcher_slurm_->SlurmJobId(id, 2), "43");
}

// Slurm requeued the job by itself (node failure): the attempt ends, the
// requeued job is cancelled so the old generation cannot run again.
TEST_F(SlurmJobTest, RequeueBySlurmRestartsAndCancelsTheRequeuedJob) {
  const std::string id = StartSlurmJob();
  slurm_->Scontrol("PENDING", "0:0", /*restarts=*/1, "BeginTime");
  TickLater();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "requeued")) << Reason(id);
  EXPECT_EQ(slurm_->Calls("scancel").rfind("argv: [42]\n", 0), 0u) << slurm_->Calls("scancel");
}

TEST_F(SlurmJobTest, UnavailableSbatchRefusesTheSubmission) {
  SlurmLauncherOptions o = slurm_->Options();
  o.sbatch = Path("slurm/bin/missing-sbatch");
  broken_ = std::make_unique<SlurmLauncher>(o);
  manager_->AddLauncher(broken_.get());
  auto st = manager_->Submit(Spec(JobYaml(), {"resources.launcher=slurm"}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st.status().message(), "missing-sbatch")) << st.status().ToString();
  EXPECT_TRUE(manager_->List(true).empty());
}

}  // namespace
}  // namespace shardd::testing
