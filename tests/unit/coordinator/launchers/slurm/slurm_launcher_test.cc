// The Slurm launcher against stand-ins (fake_slurm.h): tiny shell scripts in
// the scratch dir play sbatch, scontrol, sacct, scancel and squeue
// (SlurmLauncherOptions names them), record their argv, token and cwd, and
// print whatever the test told them to. No Slurm, no network.
#include "coordinator/launchers/slurm/slurm_launcher.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>

#include "coordinator/launchers/slurm/slurm_script.h"
#include "tests/unit/coordinator/launchers/slurm/fake_slurm.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

constexpr char kToken[] = "feedfacecafebeef-attempt-token";

class SlurmLauncherTest : public ScratchTest {
 protected:
  void SetUp() override {
    ScratchTest::SetUp();
    if (HasFatalFailure()) return;
    slurm_ = std::make_unique<FakeSlurm>(dir_);
    opts_ = slurm_->Options();
    fs::create_directories(Path("work"));
  }

  void Answer(const std::string& name, const std::string& out, int rc = 0, const std::string& err = "") {
    slurm_->Answer(name, out, rc, err);
  }
  void Scontrol(const std::string& state, const std::string& exit_code = "0:0", int restarts = 0,
                const std::string& reason = "None") {
    slurm_->Scontrol(state, exit_code, restarts, reason);
  }
  std::string Calls(const std::string& name) { return slurm_->Calls(name); }
  int CountCalls(const std::string& name) { return slurm_->CountCalls(name); }

  LaunchRequest Request(double poll_interval_s = 1e-6) {
    LaunchRequest r;
    r.job_id = "tiny-1";
    r.attempt = 1;
    r.world = 2;
    r.workdir = Path("work");
    r.log_dir = Path("state/jobs/tiny-1/attempt_1");
    r.coordinator = "127.0.0.1:7000";
    r.worker_bin = "/opt/shardd/bin/shardd-worker";
    r.env["SHARDD_WORKER_TOKEN"] = kToken;
    r.job_name = "tiny";
    r.resources.launcher = shard::Launcher::kSlurm;
    r.resources.slurm.poll_interval_s = poll_interval_s;
    return r;
  }
  // Launches attempt 1 (sbatch answers 42).
  void Launched(SlurmLauncher& l, double poll_interval_s = 1e-6) {
    auto pids = l.Launch(Request(poll_interval_s));
    ASSERT_TRUE(pids.ok()) << pids.status().ToString();
    ASSERT_EQ(l.SlurmJobId("tiny-1", 1), "42");
  }
  // One whole-allocation exit from the next Poll.
  RankExit OneExit(SlurmLauncher& l) {
    std::vector<RankExit> exits = l.Poll();
    EXPECT_EQ(exits.size(), 1u);
    if (exits.empty()) return {};
    EXPECT_EQ(exits[0].job_id, "tiny-1");
    EXPECT_EQ(exits[0].attempt, 1);
    EXPECT_EQ(exits[0].rank, RankExit::kAllRanks);
    return exits[0];
  }

  std::unique_ptr<FakeSlurm> slurm_;
  SlurmLauncherOptions opts_;
};

TEST_F(SlurmLauncherTest, LaunchWritesTheScriptAndPassesTheTokenInTheEnvironment) {
  SlurmLauncher l(opts_);
  const LaunchRequest req = Request();
  auto pids = l.Launch(req);
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_EQ(*pids, (std::vector<int>{0, 0}));
  EXPECT_EQ(l.SlurmJobId("tiny-1", 1), "42");

  const std::string script = req.log_dir + "/job.sbatch";
  ASSERT_TRUE(fs::exists(script));
  EXPECT_EQ(ReadBytes(script), RenderSbatchScript(req));
  const std::string calls = Calls("sbatch");
  EXPECT_EQ(CountCalls("sbatch"), 1);
  EXPECT_TRUE(Contains(calls, "argv: [--parsable] [" + script + "]\n")) << calls;
  EXPECT_TRUE(Contains(calls, std::string("token:") + kToken + "\n")) << calls;
  EXPECT_TRUE(Contains(calls, "cwd:" + Path("work") + "\n")) << calls;
  EXPECT_FALSE(Contains(calls.substr(0, calls.find('\n')), kToken)) << "the token is in argv: " << calls;
}

// sbatch --export=ALL hands sbatch's environment to every worker: the
// coordinator's admin token must not be in it (the local launcher drops it too).
TEST_F(SlurmLauncherTest, TheAdminTokenIsNotPassedToTheWorkers) {
  ::setenv("SHARDD_TOKEN", "admin-secret", 1);
  SlurmLauncher l(opts_);
  auto pids = l.Launch(Request());
  ::unsetenv("SHARDD_TOKEN");
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_TRUE(Contains(Calls("sbatch"), "admin:[]\n")) << "the admin token reached sbatch: " << Calls("sbatch");
}

// Nor are the coordinator's own TLS files: the workers get the request's.
TEST_F(SlurmLauncherTest, WorkersGetTheRequestsTlsFilesNotTheCoordinators) {
  ::setenv("SHARDD_TLS_CA", "/coordinator/ca.pem", 1);
  ::setenv("SHARDD_TLS_CERT", "/coordinator/server.pem", 1);
  ::setenv("SHARDD_TLS_KEY", "/coordinator/server.key", 1);
  SlurmLauncher l(opts_);
  LaunchRequest req = Request();
  req.env["SHARDD_TLS_CA"] = "/shared/ca.pem";
  auto pids = l.Launch(req);
  for (const char* v : {"SHARDD_TLS_CA", "SHARDD_TLS_CERT", "SHARDD_TLS_KEY"}) ::unsetenv(v);
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_TRUE(Contains(Calls("sbatch"), "tls:[/shared/ca.pem||]\n")) << Calls("sbatch");
}

TEST_F(SlurmLauncherTest, ParsableOutputWithAClusterNameGivesTheId) {
  Answer("sbatch", "43;cluster-a\n");
  SlurmLauncher l(opts_);
  ASSERT_TRUE(l.Launch(Request()).ok());
  EXPECT_EQ(l.SlurmJobId("tiny-1", 1), "43");
}

TEST_F(SlurmLauncherTest, SbatchFailureIsALaunchErrorWithItsStderr) {
  Answer("sbatch", "", 1, "sbatch: error: invalid partition specified: nope\n");
  SlurmLauncher l(opts_);
  auto pids = l.Launch(Request());
  ASSERT_FALSE(pids.ok());
  EXPECT_TRUE(Contains(pids.status().message(), "sbatch: error: invalid partition specified: nope"))
      << pids.status().ToString();
  EXPECT_EQ(pids.status().code(), StatusCode::kFailedPrecondition) << "a refusal is not worth a retry";
  EXPECT_EQ(l.SlurmJobId("tiny-1", 1), "");

  // A controller that is busy or restarting is worth another attempt.
  Answer("sbatch", "", 1, "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n");
  pids = l.Launch(Request());
  ASSERT_FALSE(pids.ok());
  EXPECT_EQ(pids.status().code(), StatusCode::kUnavailable) << pids.status().ToString();

  Answer("sbatch", "Submitted batch job 42\n");
  pids = l.Launch(Request());
  ASSERT_FALSE(pids.ok());
  EXPECT_TRUE(Contains(pids.status().message(), "not a job id")) << pids.status().ToString();
}

TEST_F(SlurmLauncherTest, PollsAreRateLimitedAndARunningJobReportsNothing) {
  Scontrol("RUNNING");
  SlurmLauncher l(opts_);
  Launched(l, /*poll_interval_s=*/3600);
  EXPECT_TRUE(l.Poll().empty());
  EXPECT_EQ(CountCalls("scontrol"), 1);
  EXPECT_TRUE(Contains(Calls("scontrol"), "argv: [show] [job] [-o] [42]\n")) << Calls("scontrol");
  EXPECT_TRUE(l.Poll().empty());
  EXPECT_EQ(l.Running("tiny-1", 1), 1);
  EXPECT_EQ(CountCalls("scontrol"), 1) << "asked Slurm again within poll_interval_s";
}

TEST_F(SlurmLauncherTest, CompletedJobIsOneWholeAllocationExitWithCodeZero) {
  Scontrol("RUNNING");
  SlurmLauncher l(opts_);
  Launched(l);
  EXPECT_TRUE(l.Poll().empty());
  Scontrol("COMPLETED", "0:0");
  const RankExit e = OneExit(l);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(e.signal, 0);
  EXPECT_EQ(e.detail, "");
  const int asked = CountCalls("scontrol");
  EXPECT_TRUE(l.Poll().empty()) << "an exit is reported once";
  EXPECT_EQ(CountCalls("scontrol"), asked) << "an ended job is not asked about again";
}

TEST_F(SlurmLauncherTest, FailedJobReportsTheWorkersExitCode) {
  Scontrol("FAILED", "2:0", 0, "NonZeroExitCode");
  SlurmLauncher l(opts_);
  Launched(l);
  const RankExit e = OneExit(l);
  EXPECT_EQ(e.exit_code, 2);
  EXPECT_EQ(e.signal, 0);
  EXPECT_TRUE(Contains(e.Describe(), "code 2")) << e.Describe();
}

TEST_F(SlurmLauncherTest, TimeoutIsNamedInTheDetail) {
  Scontrol("TIMEOUT", "0:15", 0, "TimeLimit");
  SlurmLauncher l(opts_);
  Launched(l);
  const RankExit e = OneExit(l);
  EXPECT_EQ(e.exit_code, -1);
  EXPECT_TRUE(Contains(e.detail, "slurm job 42 TIMEOUT")) << e.detail;
  EXPECT_EQ(e.Describe(), e.detail);
}

TEST_F(SlurmLauncherTest, RequeueBySlurmEndsTheAttempt) {
  Scontrol("RUNNING");
  SlurmLauncher l(opts_);
  Launched(l);
  EXPECT_TRUE(l.Poll().empty());
  Scontrol("PENDING", "0:0", /*restarts=*/1, "BeginTime");
  const RankExit e = OneExit(l);
  EXPECT_EQ(e.exit_code, -1);
  EXPECT_TRUE(Contains(e.detail, "requeued")) << e.detail;
  EXPECT_TRUE(Contains(e.detail, "42")) << e.detail;

  // The JobManager then ends the attempt: the requeued job would run again
  // (with a stale token), so it is cancelled although it was reported.
  l.Terminate("tiny-1", 1, /*force=*/false);
  EXPECT_EQ(Calls("scancel").rfind("argv: [42]\n", 0), 0u) << "the requeued job was not cancelled";
}

TEST_F(SlurmLauncherTest, AJobThatEndedIsNotCancelled) {
  Scontrol("COMPLETED");
  SlurmLauncher l(opts_);
  Launched(l);
  OneExit(l);
  l.Terminate("tiny-1", 1, /*force=*/false);
  EXPECT_EQ(CountCalls("scancel"), 0);
}

TEST_F(SlurmLauncherTest, ForgottenJobIsAskedOfSacct) {
  Answer("scontrol", "", 1, "slurm_load_jobs error: Invalid job id specified\n");
  Answer("sacct", "CANCELLED by 0|0:15\n");
  SlurmLauncher l(opts_);
  Launched(l);
  const RankExit e = OneExit(l);
  EXPECT_EQ(e.signal, 15);
  EXPECT_TRUE(Contains(e.detail, "CANCELLED")) << e.detail;
  EXPECT_TRUE(Contains(Calls("sacct"), "[-j] [42]")) << Calls("sacct");

  Answer("sacct", "COMPLETED|0:0\n");
  SlurmLauncher l2(opts_);
  Launched(l2);
  const RankExit done = OneExit(l2);
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_EQ(done.detail, "");
}

TEST_F(SlurmLauncherTest, JobNeitherCommandKnowsIsGone) {
  Answer("scontrol", "", 1, "slurm_load_jobs error: Invalid job id specified\n");
  Answer("sacct", "", 1, "sacct: error: Slurm accounting storage is disabled\n");
  SlurmLauncher l(opts_);
  Launched(l);
  const RankExit e = OneExit(l);
  EXPECT_EQ(e.exit_code, -1);
  EXPECT_TRUE(Contains(e.detail, "slurm job 42 is gone")) << e.detail;

  Answer("sacct", "");  // accounting answers, but knows nothing either
  SlurmLauncher l2(opts_);
  Launched(l2);
  EXPECT_TRUE(Contains(OneExit(l2).detail, "is gone"));
}

// slurmctld restarting (upgrades, failover) is no verdict on the job: without
// "Invalid job id" from scontrol or an answer from sacct, ask again later.
TEST_F(SlurmLauncherTest, UnreachableControllerIsNoVerdict) {
  Answer("scontrol", "", 1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n");
  Answer("sacct", "", 1, "sacct: error: Slurm accounting storage is disabled\n");
  SlurmLauncher l(opts_);
  Launched(l);
  EXPECT_TRUE(l.Poll().empty()) << "the job was declared gone while slurmctld was unreachable";
  EXPECT_EQ(l.Running("tiny-1", 1), 1);
  Scontrol("RUNNING");
  EXPECT_TRUE(l.Poll().empty());
  Scontrol("COMPLETED");
  EXPECT_EQ(OneExit(l).exit_code, 0);
}

TEST_F(SlurmLauncherTest, TerminateCancelsTheJobAndForceKillsIt) {
  Scontrol("RUNNING");
  SlurmLauncher l(opts_);
  Launched(l);
  l.Terminate("tiny-1", 1, /*force=*/false);
  EXPECT_EQ(Calls("scancel").rfind("argv: [42]\n", 0), 0u) << Calls("scancel");
  l.Terminate("tiny-1", 1, /*force=*/true);
  EXPECT_TRUE(Contains(Calls("scancel"), "argv: [--signal=KILL] [--full] [42]\n")) << Calls("scancel");
  l.Terminate("tiny-1", 9, /*force=*/true);  // no such attempt: nothing to cancel
  EXPECT_EQ(CountCalls("scancel"), 2);
}

TEST_F(SlurmLauncherTest, RunningCountsTheAllocationAndKeepsItsExitForPoll) {
  Scontrol("RUNNING");
  SlurmLauncher l(opts_);
  EXPECT_EQ(l.Running("tiny-1", 1), 0);
  Launched(l);
  EXPECT_EQ(l.Running("tiny-1", 1), 1);
  Scontrol("FAILED", "1:0");
  EXPECT_EQ(l.Running("tiny-1", 1), 0);
  const RankExit e = OneExit(l);  // found by Running(), returned by Poll()
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_EQ(l.Running("tiny-1", 1), 0);
}

TEST_F(SlurmLauncherTest, PendingUntilSlurmRunsTheJob) {
  Scontrol("PENDING", "0:0", 0, "Resources");
  SlurmLauncher l(opts_);
  EXPECT_FALSE(l.Pending("tiny-1", 1));
  Launched(l);
  EXPECT_TRUE(l.Pending("tiny-1", 1));
  EXPECT_TRUE(l.Poll().empty());
  Scontrol("RUNNING");
  EXPECT_FALSE(l.Pending("tiny-1", 1));
  Scontrol("COMPLETING");
  EXPECT_FALSE(l.Pending("tiny-1", 1)) << "a job that ran is not pending again";

  Scontrol("PENDING", "0:0", 0, "Priority");
  SlurmLauncher cancelled(opts_);
  Launched(cancelled);
  EXPECT_TRUE(cancelled.Pending("tiny-1", 1));
  Scontrol("CANCELLED", "0:15");
  EXPECT_FALSE(cancelled.Pending("tiny-1", 1));
  EXPECT_TRUE(Contains(OneExit(cancelled).detail, "CANCELLED")) << "the exit Pending() found was lost";

  // Unknown is not pending: an adopted job that runs keeps its heartbeat deadlines.
  Answer("scontrol", "", 1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n");
  SlurmLauncher unknown(opts_);
  Launched(unknown);
  EXPECT_FALSE(unknown.Pending("tiny-1", 1));
}

TEST_F(SlurmLauncherTest, AdoptFindsTheJobByItsName) {
  Answer("squeue", "77\n");
  Scontrol("RUNNING");
  SlurmLauncher l(opts_);
  l.Adopt("tiny-1", 1, {0, 0});
  EXPECT_EQ(l.SlurmJobId("tiny-1", 1), "77");
  EXPECT_TRUE(Contains(Calls("squeue"), "[-n] [" + SlurmJobName("tiny-1", 1) + "]")) << Calls("squeue");
  EXPECT_EQ(l.Running("tiny-1", 1), 1);
  EXPECT_TRUE(Contains(Calls("scontrol"), "[77]")) << Calls("scontrol");
  EXPECT_TRUE(l.Poll().empty());
}

TEST_F(SlurmLauncherTest, AdoptWithoutAMatchingJobReportsItGone) {
  Answer("squeue", "");
  SlurmLauncher l(opts_);
  l.Adopt("tiny-1", 1, {0, 0});
  EXPECT_EQ(l.SlurmJobId("tiny-1", 1), "");
  const RankExit e = OneExit(l);
  EXPECT_TRUE(Contains(e.detail, "no slurm job named shardd-tiny-1-a1")) << e.detail;
  EXPECT_EQ(CountCalls("scontrol"), 0);
}

TEST_F(SlurmLauncherTest, CheckAvailableRunsSbatchAndNamesItWhenMissing) {
  SlurmLauncher ok(opts_);
  EXPECT_TRUE(ok.CheckAvailable().ok());
  EXPECT_TRUE(Contains(Calls("sbatch"), "argv: [--version]\n")) << Calls("sbatch");

  SlurmLauncherOptions missing = opts_;
  missing.sbatch = Path("bin/no-such-sbatch");
  SlurmLauncher l(missing);
  const Status st = l.CheckAvailable();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st.message(), "sbatch")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "no-such-sbatch")) << st.ToString();

  Answer("sbatch", "", 1, "sbatch: error: Invalid user for SlurmUser\n");
  SlurmLauncher broken(opts_);
  const Status b = broken.CheckAvailable();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(b.message(), "Invalid user for SlurmUser")) << b.ToString();
}

TEST_F(SlurmLauncherTest, CapacityCountsThePartitionsFreeCpusOncePerPollInterval) {
  SlurmLauncher l(opts_);
  LaunchRequest r = Request(/*poll_interval_s=*/60);
  r.world = 4;
  r.attempt = 2;  // not launched here: nothing of the job's own is counted
  r.resources.slurm.partition = "debug";
  Answer("scontrol",
         "NodeName=n1 CPUAlloc=3 CPUEfctv=4 CPUTot=4 State=MIXED Partitions=debug CfgTRES=cpu=4 AllocTRES=cpu=3\n"
         "NodeName=n2 CPUAlloc=0 CPUEfctv=8 CPUTot=8 State=IDLE+DRAIN Partitions=debug CfgTRES=cpu=8 AllocTRES=\n"
         "NodeName=n3 CPUAlloc=6 CPUEfctv=8 CPUTot=8 State=MIXED Partitions=debug CfgTRES=cpu=8 AllocTRES=cpu=6\n");
  auto ranks = l.Capacity(r);
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  EXPECT_EQ(*ranks, 2) << "one node of CPU workers: n3's 2 free CPUs (n2 is drained)";
  EXPECT_NE(Calls("scontrol").find("argv: [show] [nodes] [-o]"), std::string::npos) << Calls("scontrol");
  EXPECT_EQ(*l.Capacity(r), 2);
  EXPECT_EQ(CountCalls("scontrol"), 1) << "asked again within poll_interval_s";
  r.attempt = 3;  // another attempt's places: asked afresh
  EXPECT_EQ(*l.Capacity(r), 2);
  EXPECT_EQ(CountCalls("scontrol"), 2);
  // An unreachable slurmctld is an error, not a count of 0.
  Answer("scontrol", "", 1, "slurm_load_node error: Unable to contact slurm controller");
  r.attempt = 4;
  auto down = l.Capacity(r);
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.status().message().find("Unable to contact slurm controller"), std::string::npos)
      << down.status().ToString();
}

}  // namespace
}  // namespace shardd::testing
