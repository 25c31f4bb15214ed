// The job state machine on a fake clock: registration, success, fencing of
// other attempts, restarts (signals, heartbeat deadlines, hangs) with backoff
// and a new token, max_restarts, non-retryable exits, cancel with SIGTERM then
// SIGKILL, and the event log (past events in order, live events to watchers).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdio>

#include "proto/codec/attempt_ended.h"
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
  EXPECT_EQ(r0->resume_plan().resume_from(), "auto");
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

// The attempt's rendezvous keys go when the attempt ends, however it ends;
// a call of the ended attempt stores nothing more.
TEST_F(JobManagerTest, EndedAttemptsDropTheirRendezvousKeys) {
  const std::string id = StartRunningJob();
  ASSERT_TRUE(manager_->KvSet(Worker(id, 1, 0), TokenOf(id, 1), "gloo/rank_0", "addr").ok());
  EXPECT_EQ(manager_->rendezvous()->size(), 1u);
  launcher_.Exit(id, 1, 0, 0, SIGKILL);
  manager_->Tick();
  EXPECT_EQ(manager_->rendezvous()->size(), 0u);
  EXPECT_FALSE(manager_->KvSet(Worker(id, 1, 1), TokenOf(id, 1), "gloo/rank_1", "addr").ok());
  EXPECT_EQ(manager_->rendezvous()->size(), 0u) << "a key landed in an ended attempt's space";
}

// Regression (fixed; coordinator/job_manager.cc, ReportDone): a succeeded attempt keeps its
// rendezvous keys for the coordinator's lifetime (only EndAttemptLocked drops
// them). Enable once ReportDone drops KvPrefix of the attempt.
TEST_F(JobManagerTest, SucceededAttemptDropsItsRendezvousKeys) {
  const std::string id = StartRunningJob();
  ASSERT_TRUE(manager_->KvSet(Worker(id, 1, 0), TokenOf(id, 1), "gloo/rank_0", "addr").ok());
  ASSERT_TRUE(ReportDone(id, 1, 0, TokenOf(id, 1)).ok());
  ASSERT_TRUE(ReportDone(id, 1, 1, TokenOf(id, 1)).ok());
  ASSERT_EQ(State(id), v1::SUCCEEDED);
  EXPECT_EQ(manager_->rendezvous()->size(), 0u);
}

// Regression (issue 39): 400 KvSets of 1 MiB with one job's token grew the
// coordinator by 380 MB. The job's space is bounded by its world size
// (RendezvousLimits) and the refusal names the cap; a cancel frees it.
TEST_F(JobManagerTest, RendezvousOfOneJobIsBounded) {
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  const std::string mib(RendezvousLimits::kMaxValueBytes - 8, 'x');
  shard::Status st;
  int stored = 0;
  for (int i = 0; i < 400 && st.ok(); ++i) {
    char key[9];
    std::snprintf(key, sizeof key, "v%07d", i);
    st = manager_->KvSet(Worker(id, 1, i % 2), token, key, mib);
    stored += st.ok();
  }
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("bytes per job (world size 2)"), std::string::npos) << st.ToString();
  EXPECT_EQ(static_cast<size_t>(stored), RendezvousLimits::MaxBytes(2) / RendezvousLimits::kMaxValueBytes);
  EXPECT_LE(manager_->rendezvous()->bytes(), RendezvousLimits::MaxBytes(2));
  auto over = manager_->KvSet(Worker(id, 1, 0), token, "big", std::string(RendezvousLimits::kMaxValueBytes + 1, 'x'));
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted) << over.ToString();
  ASSERT_TRUE(manager_->Cancel(id, "").ok());
  EXPECT_EQ(manager_->rendezvous()->bytes(), 0u);
}

TEST_F(JobManagerTest, RegisterWithAnotherProtocolVersionIsRefused) {
  const std::string id = SubmitJob();
  manager_->Tick();
  v1::RegisterRequest req;
  *req.mutable_id() = Worker(id, 1, 0);
  req.set_protocol_version(99);
  auto st = manager_->Register(req, TokenOf(id, 1));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st.status().message(), "99")) << st.status().ToString();
}

TEST_F(JobManagerTest, FencingRefusesWrongTokensOtherAttemptsAndBadRanks) {
  const std::string id = StartRunningJob();
  const std::string token1 = TokenOf(id, 1);

  for (const std::string& bad : {std::string(), std::string("x"), std::string(48, '0')}) {
    auto st = Heartbeat(id, 1, 0, 1, bad);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), StatusCode::kUnauthenticated) << "token '" << bad << "'";
    EXPECT_FALSE(NamesAttemptEnded(st.status())) << "a wrong token names no attempt";
  }
  EXPECT_EQ(manager_->CheckWorker(Worker(id, 1, 2), token1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_->CheckWorker(Worker("nope-9", 1, 0), token1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(manager_->CheckWorker(Worker(id, 1, 1), token1).ok());

  // Attempt 1 dies; while restarting its calls are told the attempt is over.
  launcher_.Exit(id, 1, 0, 0, SIGKILL);
  manager_->Tick();
  ASSERT_EQ(State(id), v1::RESTARTING);
  auto over = Heartbeat(id, 1, 1, 1, token1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kAborted);
  // Marked: the one answer that ends a worker (proto/codec/attempt_ended.h).
  EXPECT_TRUE(NamesAttemptEnded(over.status())) << over.status().ToString();

  Advance(3);
  launcher_.SetRunning(id, 1, 0);
  manager_->Tick();
  ASSERT_EQ(Get(id).attempt(), 2);
  const std::string token2 = TokenOf(id, 2);
  // A straggler of attempt 1 holds only attempt 1's token: told its attempt is stale.
  auto stale = Heartbeat(id, 1, 1, 1, token1);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("stale attempt"), std::string::npos) << stale.status().message();
  // Naming attempt 1 with the current token: the stale attempt is named.
  auto named = Heartbeat(id, 1, 1, 1, token2);
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(named.status().message(), "stale attempt 1")) << named.status().ToString();
  EXPECT_TRUE(NamesAttemptEnded(stale.status()) && NamesAttemptEnded(named.status())) << stale.status().ToString();
  v1::ReportDoneRequest done;
  *done.mutable_id() = Worker(id, 1, 0);
  EXPECT_EQ(manager_->ReportDone(done, token2).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Register(id, 2, 0, token2).ok());
}

TEST_F(JobManagerTest, KilledRankRestartsAfterBackoffOnceTheOldAttemptIsGone) {
  const std::string id = StartRunningJob();
  const std::string token1 = TokenOf(id, 1);

  launcher_.Exit(id, 1, 1, 0, SIGKILL);
  manager_->Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RESTARTING);
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_TRUE(Contains(s.reason(), "rank 1")) << s.reason();
  EXPECT_TRUE(Contains(s.reason(), "signal 9")) << s.reason();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/false), 1) << "the other ranks were not stopped";

  // The other rank's SIGTERM exit is the drain, not a second failure.
  launcher_.Exit(id, 1, 0, 0, SIGTERM);
  manager_->Tick();
  EXPECT_EQ(Get(id).restarts(), 1);

  // Backoff is 3 s, and attempt 1's processes must be gone first.
  Advance(2.9);
  manager_->Tick();
  EXPECT_EQ(launcher_.launches.size(), 1u) << "relaunched before the backoff";
  Advance(0.2);
  launcher_.SetRunning(id, 1, 1);  // one process of attempt 1 still runs
  manager_->Tick();
  EXPECT_EQ(launcher_.launches.size(), 1u) << "relaunched while attempt 1 still runs";
  launcher_.SetRunning(id, 1, 0);
  manager_->Tick();
  ASSERT_EQ(launcher_.launches.size(), 2u);
  EXPECT_EQ(launcher_.launches[1].attempt, 2);
  EXPECT_EQ(State(id), v1::LAUNCHING);
  EXPECT_EQ(Get(id).attempt(), 2);
  EXPECT_NE(TokenOf(id, 2), token1) << "a new attempt must get a new token";
  // Nothing is committed: attempt 2 resumes as the first one did.
  auto reg = Register(id, 2, 0, TokenOf(id, 2));
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ(reg->kv_prefix(), id + "/2/");
}

// The restart's SIGTERM is followed by SIGKILL after the grace when the old
// attempt's processes do not leave; the next attempt waits for them.
TEST_F(JobManagerTest, RestartKillsAStubbornOldAttemptAfterTheGrace) {
  const std::string id = StartRunningJob();
  launcher_.Exit(id, 1, 0, 0, SIGSEGV);
  manager_->Tick();
  ASSERT_EQ(State(id), v1::RESTARTING);
  Advance(kKillGraceS + 1);
  manager_->Tick();
  EXPECT_EQ(launcher_.CountTerminates(id, 1, /*force=*/true), 1);
  EXPECT_EQ(launcher_.launches.size(), 1u);
  launcher_.SetRunning(id, 1, 0);
  manager_->Tick();
  EXPECT_EQ(launcher_.launches.size(), 2u);
}

TEST_F(JobManagerTest, MaxRestartsExhaustedFails) {
  const std::string id = StartRunningJob({"restart.max_restarts=1"});
  launcher_.Exit(id, 1, 0, 0, SIGKILL);
  manager_->Tick();
  ASSERT_EQ(State(id), v1::RESTARTING);
  Advance(3);
  launcher_.SetRunning(id, 1, 0);
  manager_->Tick();
  ASSERT_EQ(Get(id).attempt(), 2);

  launcher_.Exit(id, 2, 1, 0, SIGKILL);
  manager_->Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::FAILED);
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_TRUE(Contains(s.reason(), "max_restarts")) << s.reason();
  EXPECT_TRUE(Contains(s.reason(), "rank 1")) << s.reason();
  Advance(100);
  launcher_.SetRunning(id, 2, 0);
  manager_->Tick();
  EXPECT_EQ(launcher_.launches.size(), 2u) << "a failed job was relaunched";
}

TEST_F(JobManagerTest, ExitCodeTwoIsBadInputAndFailsAtOnce) {
  const std::string id = StartRunningJob();
  launcher_.Exit(id, 1, 0, 2);
  manager_->Tick();
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::FAILED);
  EXPECT_EQ(s.restarts(), 0);
  EXPECT_TRUE(Contains(s.reason(), "not retryable")) << s.reason();
  EXPECT_TRUE(Contains(s.reason(), "rank_0.log")) << s.reason();
}

TEST_F(JobManagerTest, CleanExitBeforeReportingDoneIsARetryableFailure) {
  const std::string id = StartRunningJob();
  launcher_.Exit(id, 1, 1, 0);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "before reporting done")) << Reason(id);
}

// A retryable failure a worker reports restarts the attempt, after a moment
// (1 s) in which the launcher may still report the exit that caused it; a
// non-retryable one fails the job at once.
TEST_F(JobManagerTest, ReportFailureRestartsOrFailsAsTheWorkerSays) {
  const std::string id = StartRunningJob();
  v1::ReportFailureRequest req;
  *req.mutable_id() = Worker(id, 1, 1);
  req.set_error("NCCL timeout");
  req.set_retryable(true);
  ASSERT_TRUE(manager_->ReportFailure(req, TokenOf(id, 1)).ok());
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RUNNING) << "restarted before the launcher could name the cause";
  Advance(1);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 1 failed: NCCL timeout")) << Reason(id);

  Advance(3);
  launcher_.SetRunning(id, 1, 0);
  manager_->Tick();
  ASSERT_EQ(Get(id).attempt(), 2);
  *req.mutable_id() = Worker(id, 2, 0);
  req.set_error("model.preset: no such preset");
  req.set_retryable(false);
  ASSERT_TRUE(manager_->ReportFailure(req, TokenOf(id, 2)).ok());
  EXPECT_EQ(State(id), v1::FAILED);
  EXPECT_TRUE(Contains(Reason(id), "not retryable")) << Reason(id);
  EXPECT_EQ(Get(id).restarts(), 1);
}

// A survivor's report of a peer's death is not the cause: when the launcher
// reports the peer's exit within the moment, that names the restart, and the
// attempt restarts once.
TEST_F(JobManagerTest, TheLaunchersExitNamesTheCauseOverASurvivorsReport) {
  const std::string id = StartRunningJob();
  v1::ReportFailureRequest req;
  *req.mutable_id() = Worker(id, 1, 1);
  req.set_error("gloo: connection reset by peer");
  req.set_retryable(true);
  ASSERT_TRUE(manager_->ReportFailure(req, TokenOf(id, 1)).ok());
  launcher_.Exit(id, 1, 0, 0, SIGKILL);
  Advance(0.5);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 0 killed by signal 9")) << Reason(id);
  Advance(1);
  manager_->Tick();
  EXPECT_EQ(Get(id).restarts(), 1) << "one failure restarted twice";
  EXPECT_EQ(State(id), v1::RESTARTING);
}

// Both exits in one poll (a loaded coordinator saw them late): the one killed
// by a signal names the restart, not the survivor that gave up after it.
TEST_F(JobManagerTest, ASignalledExitNamesTheCauseOverAPeerExitSeenWithIt) {
  const std::string id = StartRunningJob();
  launcher_.Exit(id, 1, 0, 1);
  launcher_.Exit(id, 1, 1, 0, SIGKILL);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 1 killed by signal 9")) << Reason(id);
  EXPECT_EQ(Get(id).restarts(), 1);
}

TEST_F(JobManagerTest, UnregisteredRankPastTheRegisterTimeoutRestarts) {
  const std::string id = SubmitJob();
  manager_->Tick();
  Advance(kRegisterTimeoutS);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING);
  Advance(1);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 0 did not register")) << Reason(id);
}

TEST_F(JobManagerTest, SilentRankPastTheHeartbeatDeadlineRestarts) {
  const std::string id = StartRunningJob();
  Advance(6);
  HeartbeatAll(id, 1);
  Advance(9);  // 15 s since registering, 9 s since the last heartbeat
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RUNNING);
  // Rank 0 keeps heartbeating; rank 1 falls silent.
  ASSERT_TRUE(Heartbeat(id, 1, 0, 2, TokenOf(id, 1)).ok());
  Advance(2);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "rank 1")) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "heartbeat")) << Reason(id);
}

TEST_F(JobManagerTest, HeartbeatsWithoutProgressPastTheHangLimitRestart) {
  const std::string id = StartRunningJob();
  // Progress resets the clock.
  for (int i = 1; i <= 20; ++i) {
    Advance(5);
    HeartbeatAll(id, i);
    manager_->Tick();
  }
  ASSERT_EQ(State(id), v1::RUNNING);
  // Then step 20 forever: alive, but stuck. The hang limit is 60 s.
  for (int i = 0; i < 12; ++i) {
    Advance(5);
    HeartbeatAll(id, 20);
    manager_->Tick();
    ASSERT_EQ(State(id), v1::RUNNING) << "restarted after only " << (i + 1) * 5 << " s without progress";
  }
  Advance(5);
  HeartbeatAll(id, 20);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "no progress")) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "at step 20")) << Reason(id);
}

// Once step times are known the hang limit shrinks to max(20 x step, 30 s).
TEST_F(JobManagerTest, KnownStepTimesShortenTheHangLimit) {
  const std::string id = StartRunningJob();
  v1::StepMetric m;
  m.set_step(1);
  m.set_seconds(1.0);
  m.set_tokens(64);
  m.set_loss(5.0);
  ASSERT_TRUE(Heartbeat(id, 1, 0, 1, TokenOf(id, 1), {m}).ok());
  ASSERT_TRUE(Heartbeat(id, 1, 1, 1, TokenOf(id, 1)).ok());
  EXPECT_EQ(Get(id).progress().step(), 1);
  EXPECT_DOUBLE_EQ(Get(id).progress().tokens_per_s(), 64.0);
  EXPECT_DOUBLE_EQ(Get(id).progress().eta_s(), 99.0);
  for (int i = 0; i < 6; ++i) {
    Advance(5);
    HeartbeatAll(id, 1);
    manager_->Tick();
  }
  EXPECT_EQ(State(id), v1::RUNNING) << Reason(id);
  Advance(1);
  HeartbeatAll(id, 1);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::RESTARTING);
  EXPECT_TRUE(Contains(Reason(id), "hang limit 30.0 s")) << Reason(id);
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

TEST_F(JobManagerTest, CancelOfAQueuedJobLaunchesNothing) {
  const std::string id = SubmitJob();
  ASSERT_TRUE(manager_->Cancel(id, "changed my mind").ok());
  manager_->Tick();
  EXPECT_TRUE(launcher_.launches.empty());
  EXPECT_TRUE(launcher_.terminates.empty());
  EXPECT_EQ(Reason(id), "changed my mind");
  EXPECT_TRUE(manager_->Drained(id));
}

TEST_F(JobManagerTest, WatchReturnsPastEventsInOrderAndSendsLiveOnes) {
  const std::string id = StartRunningJob();
  std::vector<v1::JobEvent> past;
  std::vector<v1::JobEvent> live;
  auto watch = manager_->Watch(id, 0, [&](const v1::JobEvent& e) { live.push_back(e); }, &past);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_EQ(past.size(), 3u);
  EXPECT_EQ(past[0].kind(), "submitted");
  EXPECT_EQ(past[0].state(), v1::QUEUED);
  EXPECT_EQ(past[1].kind(), "launching");
  EXPECT_EQ(past[1].state(), v1::LAUNCHING);
  EXPECT_EQ(past[2].kind(), "running");
  EXPECT_EQ(past[2].state(), v1::RUNNING);
  for (size_t i = 0; i < past.size(); ++i) {
    EXPECT_EQ(past[i].seq(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(past[i].job_id(), id);
  }
  EXPECT_EQ(past[1].attempt(), 1);
  EXPECT_TRUE(live.empty());

  // A live state change, and a progress update (live only, no seq).
  v1::StepMetric m;
  m.set_step(7);
  m.set_seconds(0.5);
  m.set_tokens(64);
  m.set_loss(3.5);
  ASSERT_TRUE(Heartbeat(id, 1, 0, 7, TokenOf(id, 1), {m}).ok());
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].kind(), "progress");
  EXPECT_EQ(live[0].progress().step(), 7);
  EXPECT_DOUBLE_EQ(live[0].progress().loss(), 3.5);

  launcher_.Exit(id, 1, 0, 0, SIGKILL);
  manager_->Tick();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[1].kind(), "restarting");
  EXPECT_EQ(live[1].seq(), 4);
  EXPECT_EQ(live[1].state(), v1::RESTARTING);

  // Resuming after seq 2 skips what was seen; Unwatch stops delivery.
  std::vector<v1::JobEvent> tail;
  auto w2 = manager_->Watch(id, 2, [](const v1::JobEvent&) {}, &tail);
  ASSERT_TRUE(w2.ok());
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].seq(), 3);
  EXPECT_EQ(tail[1].seq(), 4);
  EXPECT_EQ(tail.back().progress().step(), 7) << "the newest event carries the current progress";
  manager_->Unwatch(*watch);
  manager_->Unwatch(*w2);
  ASSERT_TRUE(manager_->Cancel(id, "").ok());
  EXPECT_EQ(live.size(), 2u);

  // Stored metrics: the heartbeat's step.
  auto metrics = store_->LoadMetrics(id);
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->size(), 1u);
  EXPECT_EQ((*metrics)[0].step, 7);
  EXPECT_EQ(manager_->Watch("nope-1", 0, nullptr, &tail).status().code(), StatusCode::kNotFound);
}

TEST_F(JobManagerTest, LogsReadTheAttemptsRankLog) {
  const std::string id = SubmitJob();
  EXPECT_EQ(manager_->Logs(id, 0, 0, 0, 0).status().code(), StatusCode::kFailedPrecondition);
  manager_->Tick();
  WriteBytes(Path("state") + "/jobs/" + id + "/attempt_1/rank_1.log", "hello from rank 1\n");
  auto chunk = manager_->Logs(id, 1, 0, 6, 4);
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_EQ(chunk->data, "from");
  EXPECT_EQ(chunk->next_offset, 10);
  EXPECT_EQ(chunk->attempt, 1);
  EXPECT_FALSE(chunk->finished);
  auto tail = manager_->Logs(id, 1, 0, -1, 8);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->data, " rank 1\n");
  EXPECT_EQ(manager_->Logs(id, 2, 0, 0, 0).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(manager_->Logs(id, 0, 2, 0, 0).status().code(), StatusCode::kOutOfRange);
}

// The job's processes can write in its log folder: a log swapped for a
// symlink (or a folder on the way) is refused, never followed, and a FIFO is
// not opened for reading (it would block the RPC).
TEST_F(JobManagerTest, LogsAreNeverServedThroughASymlink) {
  const std::string id = SubmitJob();
  manager_->Tick();
  const std::string attempt_dir = Path("state") + "/jobs/" + id + "/attempt_1";
  WriteBytes(Path("secret"), "root:hash:...\n");
  WriteBytes(attempt_dir + "/rank_0.log", "plain log\n");
  fs::create_symlink(Path("secret"), attempt_dir + "/rank_1.log");
  auto chunk = manager_->Logs(id, 1, 0, 0, 0);
  ASSERT_FALSE(chunk.ok());
  EXPECT_EQ(chunk.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(chunk.status().message(), "rank_1.log is a symbolic link")) << chunk.status().ToString();
  EXPECT_FALSE(Contains(chunk.status().message(), "root:hash"));
  auto plain = manager_->Logs(id, 0, 0, 0, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->data, "plain log\n");
  // A Kubernetes pod's rank log is a link to the pod's log beside it: served.
  WriteBytes(attempt_dir + "/pod_0.log", "from the pod\n");
  fs::remove(attempt_dir + "/rank_0.log");
  fs::create_symlink("pod_0.log", attempt_dir + "/rank_0.log");
  auto pod = manager_->Logs(id, 0, 0, 0, 0);
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  EXPECT_EQ(pod->data, "from the pod\n");
  // ... but not a pod log link that leads elsewhere.
  fs::remove(attempt_dir + "/rank_0.log");
  fs::create_symlink("../../../../secret", attempt_dir + "/rank_0.log");
  EXPECT_EQ(manager_->Logs(id, 0, 0, 0, 0).status().code(), StatusCode::kPermissionDenied);

  // The attempt's folder itself swapped for a symlink to a folder of logs.
  WriteBytes(Path("elsewhere/rank_0.log"), "not this job's\n");
  WriteBytes(Path("elsewhere/pod_0.log"), "not this job's\n");
  fs::rename(attempt_dir, attempt_dir + ".old");
  fs::create_symlink(Path("elsewhere"), attempt_dir);
  auto through_dir = manager_->Logs(id, 0, 0, 0, 0);
  ASSERT_FALSE(through_dir.ok());
  EXPECT_EQ(through_dir.status().code(), StatusCode::kPermissionDenied);

  fs::remove(attempt_dir);
  fs::create_directories(attempt_dir);
  ASSERT_EQ(::mkfifo((attempt_dir + "/rank_0.log").c_str(), 0600), 0);
  EXPECT_EQ(manager_->Logs(id, 0, 0, 0, 0).status().code(), StatusCode::kPermissionDenied);
}

// A rank that reported its error and then exited: the restart names the
// error, not only the exit code. A rank that died before it could report:
// the last error line of its log.
TEST_F(JobManagerTest, ARanksExitNamesTheErrorItReportedOrLogged) {
  const std::string id = StartRunningJob({"restart.max_restarts=0"});
  v1::ReportFailureRequest req;
  *req.mutable_id() = Worker(id, 1, 0);
  req.set_error("INTERNAL: cannot write ckpt/tiny/step_00000005: No space left on device");
  req.set_retryable(true);
  ASSERT_TRUE(manager_->ReportFailure(req, TokenOf(id, 1)).ok());
  launcher_.Exit(id, 1, 0, 1);
  manager_->Tick();
  EXPECT_EQ(State(id), v1::FAILED);
  EXPECT_TRUE(Contains(Reason(id), "rank 0 exited with code 1: INTERNAL: cannot write ckpt/tiny/step_00000005: No "
                                   "space left on device"))
      << Reason(id);

  const std::string other = SubmitJob({"restart.max_restarts=0"}, "other");
  manager_->Tick();
  RegisterAll(other);
  WriteBytes(Path("state") + "/jobs/" + other + "/attempt_1/rank_1.log",
             "2026-12-01 10:00:00.000 I [other/a1/r1] starting\n"
             "shardd-worker: FAILED_PRECONDITION: device: cuda:3, but this host has 2 GPUs\n");
  launcher_.Exit(other, 1, 1, 1);
  manager_->Tick();
  EXPECT_EQ(State(other), v1::FAILED);
  EXPECT_TRUE(Contains(Reason(other), "rank 1 exited with code 1: FAILED_PRECONDITION: device: cuda:3")) << Reason(other);
}

}  // namespace
}  // namespace shardd::testing

namespace shardd::testing {
namespace {

std::vector<v1::JobEvent> PastEvents(JobManager* m, const std::string& id) {
  std::vector<v1::JobEvent> past;
  auto w = m->Watch(id, 0, [](const v1::JobEvent&) {}, &past);
  EXPECT_TRUE(w.ok());
  if (w.ok()) m->Unwatch(*w);
  return past;
}

// Issue 18 item 3: the checkpoint a worker loaded is an event (run and watch
// print it), once per attempt; an attempt that resumed at or past
// train.steps ends SUCCEEDED saying "already complete", not "final loss".
TEST_F(JobManagerTest, TheResumedStepIsAnEventAndAlreadyCompleteIsSaidAsSuch) {
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  for (int i = 0; i < 3; ++i) {
    v1::HeartbeatRequest req;
    *req.mutable_id() = Worker(id, 1, 0);
    req.set_step(100);
    req.set_resumed_from("/runs/tiny/step_00000100");
    req.set_resumed_step(100);
    ASSERT_TRUE(manager_->Heartbeat(req, token).ok());
  }
  int resumed = 0;
  for (const auto& e : PastEvents(manager_.get(), id)) {
    if (e.kind() != "resumed") continue;
    ++resumed;
    // An older worker sends no tier: a disk step.
    EXPECT_NE(e.message().find("resumed from step 100 (disk): /runs/tiny/step_00000100 at step 100 >= train.steps 100"),
              std::string::npos)
        << e.message();
  }
  EXPECT_EQ(resumed, 1) << "one event per attempt, not one per heartbeat";
  for (int r = 0; r < 2; ++r) {
    v1::ReportDoneRequest req;
    *req.mutable_id() = Worker(id, 1, r);
    req.set_step(100);
    req.set_final_loss(0.0);
    req.set_nothing_trained(true);
    req.set_total_steps(100);
    ASSERT_TRUE(manager_->ReportDone(req, token).ok());
  }
  EXPECT_EQ(State(id), v1::SUCCEEDED);
  EXPECT_NE(Reason(id).find("already complete"), std::string::npos) << Reason(id);
  EXPECT_EQ(Reason(id).find("final loss"), std::string::npos) << Reason(id);
}

}  // namespace
}  // namespace shardd::testing
