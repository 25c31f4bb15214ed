// What the Slurm launcher reads from Slurm: one-line `scontrol show job -o`
// records in each state it acts on (exit code and signal, requeues) and
// `sacct -P` rows for jobs slurmctld has forgotten. Garbage is an error that
// quotes it; an empty sacct answer is NotFound.
#include "coordinator/launchers/slurm/slurm_status.h"

#include <gtest/gtest.h>

#include <string>

namespace shardd {
namespace {

using shard::StatusCode;

// A real-looking record (slurm 23.x, -o: one line of KEY=VALUE fields).
std::string Scontrol(const std::string& state, const std::string& reason, const std::string& exit_code,
                     int restarts = 0) {
  return "JobId=42 JobName=shardd-tiny-1-a1 UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A "
         "Priority=4294901758 Nice=0 Account=ml QOS=normal JobState=" +
         state + " Reason=" + reason + " Dependency=(null) Requeue=1 Restarts=" + std::to_string(restarts) +
         " BatchFlag=1 Reboot=0 ExitCode=" + exit_code +
         " RunTime=00:01:07 TimeLimit=01:00:00 TimeMin=N/A SubmitTime=2026-11-30T03:00:00 "
         "EligibleTime=2026-11-30T03:00:00 AccrueTime=2026-11-30T03:00:00 StartTime=2026-11-30T03:00:01 "
         "EndTime=2026-11-30T04:00:01 Deadline=N/A Partition=debug AllocNode:Sid=head:1234 NodeList=node[01-02] "
         "BatchHost=node01 NumNodes=2 NumCPUs=16 NumTasks=16 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
         "TRES=cpu=16,mem=64G,node=2,billing=16,gres/gpu=16 Command=/shared/state/jobs/tiny-1/attempt_1/job.sbatch "
         "WorkDir=/shared/work StdOut=/shared/state/jobs/tiny-1/attempt_1/slurm.log Power= TresPerTask=gres/gpu:1\n";
}

TEST(SlurmStatusTest, PendingJobWaitsWithItsReason) {
  auto info = ParseScontrolJob(Scontrol("PENDING", "Resources", "0:0"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state, "PENDING");
  EXPECT_EQ(info->reason, "Resources");
  EXPECT_EQ(info->restarts, 0);
  EXPECT_TRUE(SlurmStateActive(info->state));
  EXPECT_FALSE(SlurmStateFinal(info->state));
}

TEST(SlurmStatusTest, RunningJobIsActive) {
  auto info = ParseScontrolJob(Scontrol("RUNNING", "None", "0:0"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state, "RUNNING");
  EXPECT_EQ(info->reason, "None");
  EXPECT_TRUE(SlurmStateActive(info->state));
  EXPECT_FALSE(SlurmStateFinal(info->state));
}

TEST(SlurmStatusTest, CompletedJobHasExitCodeZero) {
  auto info = ParseScontrolJob(Scontrol("COMPLETED", "None", "0:0"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state, "COMPLETED");
  EXPECT_EQ(info->exit_code, 0);
  EXPECT_EQ(info->signal, 0);
  EXPECT_TRUE(SlurmStateFinal(info->state));
  EXPECT_FALSE(SlurmStateActive(info->state));
}

TEST(SlurmStatusTest, FailedJobCarriesTheScriptsExitCode) {
  auto info = ParseScontrolJob(Scontrol("FAILED", "NonZeroExitCode", "2:0"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state, "FAILED");
  EXPECT_EQ(info->reason, "NonZeroExitCode");
  EXPECT_EQ(info->exit_code, 2);
  EXPECT_EQ(info->signal, 0);
  EXPECT_TRUE(SlurmStateFinal(info->state));
}

TEST(SlurmStatusTest, CancelledJobCarriesItsSignal) {
  auto info = ParseScontrolJob(Scontrol("CANCELLED", "None", "0:15"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state, "CANCELLED");
  EXPECT_EQ(info->exit_code, 0);
  EXPECT_EQ(info->signal, 15);
  EXPECT_TRUE(SlurmStateFinal(info->state));
}

TEST(SlurmStatusTest, TimeoutAndPreemptedAreFinal) {
  auto timeout = ParseScontrolJob(Scontrol("TIMEOUT", "TimeLimit", "0:15"));
  ASSERT_TRUE(timeout.ok()) << timeout.status().ToString();
  EXPECT_EQ(timeout->state, "TIMEOUT");
  EXPECT_EQ(timeout->reason, "TimeLimit");
  EXPECT_TRUE(SlurmStateFinal(timeout->state));

  auto preempted = ParseScontrolJob(Scontrol("PREEMPTED", "None", "0:15"));
  ASSERT_TRUE(preempted.ok()) << preempted.status().ToString();
  EXPECT_EQ(preempted->state, "PREEMPTED");
  EXPECT_EQ(preempted->signal, 15);
  EXPECT_TRUE(SlurmStateFinal(preempted->state));
  EXPECT_FALSE(SlurmStateActive(preempted->state));
}

TEST(SlurmStatusTest, RequeuedJobCountsItsRestarts) {
  auto info = ParseScontrolJob(Scontrol("PENDING", "BeginTime", "0:0", /*restarts=*/1));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state, "PENDING");
  EXPECT_EQ(info->reason, "BeginTime");
  EXPECT_EQ(info->restarts, 1);
  EXPECT_TRUE(SlurmStateActive("REQUEUED"));
  EXPECT_FALSE(SlurmStateFinal("REQUEUED"));
}

TEST(SlurmStatusTest, GarbageIsAnErrorQuotingIt) {
  for (const std::string text : {"", "slurm_load_jobs error: Invalid job id specified\n", "JobId=42 Junk\n"}) {
    auto info = ParseScontrolJob(text);
    ASSERT_FALSE(info.ok()) << text;
    EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(info.status().message().find("no JobState"), std::string::npos) << info.status().ToString();
    EXPECT_NE(info.status().message().find("'" + text.substr(0, text.find('\n')) + "'"), std::string::npos)
        << info.status().ToString();
  }
}

TEST(SlurmStatusTest, SacctRowsGiveStateReasonAndExitCode) {
  auto done = ParseSacctJob("COMPLETED|0:0\n");
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->state, "COMPLETED");
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(done->signal, 0);

  auto cancelled = ParseSacctJob("CANCELLED by 0|0:15\n");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state, "CANCELLED");
  EXPECT_EQ(cancelled->reason, "by 0");
  EXPECT_EQ(cancelled->exit_code, 0);
  EXPECT_EQ(cancelled->signal, 15);

  auto failed = ParseSacctJob("FAILED|2:0");
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_EQ(failed->exit_code, 2);
}

TEST(SlurmStatusTest, EmptySacctAnswerIsNotFound) {
  for (const std::string text : {"", "\n", "no bar here\n"}) {
    auto info = ParseSacctJob(text);
    ASSERT_FALSE(info.ok()) << "'" << text << "'";
    EXPECT_EQ(info.status().code(), StatusCode::kNotFound);
  }
}

}  // namespace
}  // namespace shardd
