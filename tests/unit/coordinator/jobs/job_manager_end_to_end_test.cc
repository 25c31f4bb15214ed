// The JobManager facade end to end, over a fake launcher, a fake clock and a
// real StateStore: a whole run (submit, launch, register, done), a cancel from
// the first SIGTERM to the SIGKILL after the grace, and a coordinator restart
// through the store (a second JobManager adopts the running attempt, which
// restarts without heartbeats or keeps running with them). Each owner's own
// cases are in its test beside this one (worker_gateway_*, attempt_lifecycle_*,
// control_loop_*, job_submission_*, job_queries_*, job_recovery_*, elastic_*).
#include <gtest/gtest.h>

#include <csignal>

#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

TEST_F(JobManagerTest, EveryRankRegisteredIsRunningEveryRankDoneIsSucceeded) {
  const std::string id = SubmitJob();
  manager_->Tick();
  const std::string token = TokenOf(id, 1);

  auto r0 = Register(id, 1, 0, token);
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  EXPECT_EQ(State(id), v1::LAUNCHING) << "running before every rank registered";
  EXPECT_EQ(r0->world_size(), 2);
  EXPECT_EQ(r0->kv_prefix(), id + "/1/");
  EXPECT_EQ(r0->resume_plan().resume_from(), "none") << "a fresh job: the coordinator chose scratch, not the job file's auto";
  EXPECT_EQ(r0->spec().workdir(), workdir_);
  EXPECT_EQ(r0->protocol_version(), v1::PROTOCOL_VERSION_CURRENT);
  ASSERT_TRUE(Register(id, 1, 1, token).ok());
  EXPECT_EQ(State(id), v1::RUNNING);
  EXPECT_EQ(Get(id).workers(1).hostname(), "host-1");

  ASSERT_TRUE(ReportDone(id, 1, 0, token).ok());
  EXPECT_EQ(State(id), v1::RUNNING) << "succeeded before every rank was done";
  ASSERT_TRUE(ReportDone(id, 1, 1, token).ok());
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::SUCCEEDED);
  EXPECT_EQ(s.progress().step(), 100);
  EXPECT_DOUBLE_EQ(s.progress().loss(), 1.25);

  // The ranks exit by themselves; exit code 0 of a done rank is no failure.
  launcher_.Exit(id, 1, 0, 0);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::SUCCEEDED);
  // One lingers past the grace: SIGKILL.
  EXPECT_FALSE(manager_->Drained(id));
  Advance(kKillGraceS + 1);
  manager_->Tick();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/true), 1);
  launcher_.SetRunning(id, 1, 0);
  manager_->Tick();
  EXPECT_TRUE(manager_->Drained(id));
  EXPECT_TRUE(manager_->List(/*include_finished=*/false).empty());
  EXPECT_EQ(manager_->List(/*include_finished=*/true).size(), 1u);
}

TEST_F(JobManagerTest, CancelTerminatesThenKillsAfterTheGrace) {
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  auto st = manager_->Cancel(id, "");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state(), v1::CANCELLED);
  EXPECT_TRUE(Contains(st->reason(), "cancelled")) << st->reason();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/false), 1);
  EXPECT_FALSE(manager_->Drained(id));

  // Workers are told the attempt is over.
  auto hb = Heartbeat(id, 1, 0, 1, token);
  ASSERT_FALSE(hb.ok());
  EXPECT_EQ(hb.status().code(), StatusCode::kAborted);

  Advance(kKillGraceS - 1);
  manager_->Tick();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/true), 0) << "SIGKILL before the grace";
  Advance(1);
  manager_->Tick();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/true), 1);
  launcher_.SetRunning(id, 1, 0);
  manager_->Tick();
  EXPECT_TRUE(manager_->Drained(id));
  Advance(60);
  manager_->Tick();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/true), 1);

  // Idempotent; the reason stays.
  auto again = manager_->Cancel(id, "second");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state(), v1::CANCELLED);
  EXPECT_FALSE(Contains(again->reason(), "second"));
  EXPECT_EQ(manager_->Cancel("nope-3", "").status().code(), StatusCode::kNotFound);
}

TEST_F(JobManagerTest, RecoveredRunningJobIsAdoptedAndRestartsWithoutHeartbeats) {
  const std::string id = StartRunningJob();
  manager_.reset();

  FakeLauncher second;
  manager_ = NewManager(&second);
  ASSERT_TRUE(manager_->Recover().ok());
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RUNNING);
  EXPECT_EQ(s.attempt(), 1);
  ASSERT_EQ(s.workers_size(), 2);
  EXPECT_EQ(s.workers(1).pid(), 4001);
  EXPECT_EQ(s.workers(1).hostname(), "host-1");
  ASSERT_EQ(second.adopts.size(), 1u);
  EXPECT_EQ(second.adopts[0].job_id, id);
  EXPECT_EQ(second.adopts[0].attempt, 1);
  EXPECT_EQ(second.adopts[0].pids, (std::vector<int>{4000, 4001}));
  EXPECT_EQ(EventKinds(id).back(), "adopting");

  Advance(10);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RUNNING);
  Advance(1);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "heartbeat")) << Reason(id);
  EXPECT_EQ(second.CountTerminates(id, 1, /*force=*/false), 1) << "the adopted workers were not stopped";

  Advance(3);
  second.SetRunning(id, 1, 0);
  manager_->Tick();
  ASSERT_EQ(second.launches.size(), 1u);
  EXPECT_EQ(second.launches[0].attempt, 2);
}

TEST_F(JobManagerTest, RecoveredJobWhoseWorkersHeartbeatKeepsRunning) {
  const std::string id = StartRunningJob();
  manager_.reset();
  FakeLauncher second;
  manager_ = NewManager(&second);
  ASSERT_TRUE(manager_->Recover().ok());

  // The workers kept their attempt token across the restart.
  for (int i = 1; i <= 6; ++i) {
    Advance(5);
    HeartbeatAll(id, i);
    manager_->Tick();
  }
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
  const auto kinds = EventKinds(id);
  EXPECT_EQ(kinds, (std::vector<std::string>{"submitted", "launching", "running", "adopting", "adopted"}));
  EXPECT_TRUE(second.launches.empty());

  // Done from every rank still succeeds, and numbering continues.
  ASSERT_TRUE(ReportDone(id, 1, 0, TokenOf(id, 1)).ok());
  ASSERT_TRUE(ReportDone(id, 1, 1, TokenOf(id, 1)).ok());
  EXPECT_EQ(State(id), v1::SUCCEEDED);
  auto next = manager_->Submit(Spec(JobYaml("other")));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->id(), "other-2");
}

}  // namespace
}  // namespace shardd::testing
