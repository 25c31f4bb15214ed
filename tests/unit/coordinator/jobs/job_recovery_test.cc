// Recovery alone: jobs stored by one set of parts are loaded by a fresh set
// over the same store. A running attempt is adopted (the launcher watches its
// pids again, its ranks get a heartbeat deadline); a spec that no longer
// parses, or a launcher this coordinator lacks, fails the job with the reason;
// a read-only view changes nothing; numbering continues after the stored jobs;
// the flight recorder's last account of a stall (JobStatus.stall) comes back.
#include "coordinator/jobs/job_recovery.h"

#include <gtest/gtest.h>

#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

class JobRecoveryTest : public JobPartsTest {
 protected:
  // A job stored as RUNNING in attempt 1 with its workers' pids, as the
  // previous coordinator left it.
  std::string StoredRunning() {
    Job& j = AddJob();
    Begin(j);
    auto lock = table_->Lock();
    attempts_->FinishLaunch(j.id, 1, std::vector<int>{501, 502});
    table_->SetState(j, v1::RUNNING, "running", "all 2 worker(s) registered");
    return j.id;
  }
  // A fresh set of parts over the same store; runs Recover.
  Status Restart() {
    Build();
    launcher_.adopts.clear();
    recovery_ = std::make_unique<JobRecovery>(opts_, table_.get(), runner_.get(), sched_.get());
    return recovery_->Recover();
  }
  Job* Find(const std::string& id) {
    auto lock = table_->Lock();
    auto j = table_->Find(id);
    return j.ok() ? *j : nullptr;
  }
  std::unique_ptr<JobRecovery> recovery_;
};

TEST_F(JobRecoveryTest, ARunningAttemptIsAdopted) {
  const std::string id = StoredRunning();
  now_ms_ += 60000;
  ASSERT_TRUE(Restart().ok());
  Job* j = Find(id);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state, v1::RUNNING);
  EXPECT_TRUE(j->adopted);
  ASSERT_EQ(launcher_.adopts.size(), 1u);
  EXPECT_EQ(launcher_.adopts[0].pids, (std::vector<int>{501, 502}));
  EXPECT_EQ(j->ranks[1].state, "adopting");
  EXPECT_EQ(j->ranks[1].last_heartbeat_ms, now_ms_);
  EXPECT_EQ(Events(id).back().kind, "adopting");
  auto lock = table_->Lock();
  EXPECT_EQ(table_->NewJobId("tiny"), "tiny-2");
}

TEST_F(JobRecoveryTest, TheLastStallsAccountSurvivesARestart) {
  const std::string id = StoredRunning();
  {
    auto lock = table_->Lock();
    Job& j = **table_->Find(id);
    // As ExplainStall leaves it: the account, then its event (one transaction).
    j.health.stall.set_text("ranks 0 waited 62 s in all_gather #41 (unit 3); rank 1 never entered it");
    j.health.stall.set_attempt(1);
    j.health.stall.set_unix_ms(now_ms_);
    j.health.stall.set_trigger("hang");
    table_->Emit(j, "stall_cause", j.health.stall.text());
  }
  now_ms_ += 60000;
  ASSERT_TRUE(Restart().ok());
  Job* j = Find(id);
  ASSERT_NE(j, nullptr);
  auto lock = table_->Lock();
  const v1::JobStatus st = table_->StatusOf(*j);
  ASSERT_TRUE(st.has_stall()) << "shardctl status lost the stall with the coordinator";
  EXPECT_EQ(st.stall().text(), "ranks 0 waited 62 s in all_gather #41 (unit 3); rank 1 never entered it");
  EXPECT_EQ(st.stall().attempt(), 1);
  EXPECT_EQ(st.stall().trigger(), "hang");
}

TEST_F(JobRecoveryTest, ASpecThatNoLongerParsesFailsTheJob) {
  const std::string id = StoredRunning();
  auto jobs = store_->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  JobRecord rec = (*jobs)[0];
  v1::JobSpec spec;
  ASSERT_TRUE(spec.ParseFromString(rec.spec));
  spec.set_yaml("name: tiny\nno_such_section: 1\n");
  rec.spec = spec.SerializeAsString();
  ASSERT_TRUE(store_->PutJob(rec).ok());
  ASSERT_TRUE(Restart().ok());
  Job* j = Find(id);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state, v1::FAILED);
  EXPECT_EQ(j->reason.rfind("stored job spec no longer parses: ", 0), 0u) << j->reason;
  EXPECT_TRUE(launcher_.adopts.empty());
}

TEST_F(JobRecoveryTest, ALauncherThisCoordinatorLacksFailsTheJob) {
  const std::string id = StoredRunning();
  FakeLauncher slurm("slurm");
  attempts_.reset();
  // Parts with only a "slurm" launcher: the stored local job cannot be watched.
  table_ = std::make_unique<JobTable>(opts_, store_.get());
  runner_ = std::make_unique<AttemptRunner>(table_.get());
  runner_->AddLauncher(&slurm);
  sched_ = std::make_unique<JobScheduler>(opts_, table_.get());
  recovery_ = std::make_unique<JobRecovery>(opts_, table_.get(), runner_.get(), sched_.get());
  ASSERT_TRUE(recovery_->Recover().ok());
  Job* j = Find(id);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state, v1::FAILED);
  EXPECT_EQ(j->reason, "this coordinator has no 'local' launcher any more, so the job's workers can be neither "
                       "watched nor restarted");
}

TEST_F(JobRecoveryTest, AReadOnlyViewChangesNothing) {
  const std::string id = StoredRunning();
  const size_t events = Events(id).size();
  opts_.read_only = true;
  ASSERT_TRUE(Restart().ok());
  Job* j = Find(id);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state, v1::RUNNING);
  EXPECT_FALSE(j->adopted);
  EXPECT_TRUE(launcher_.adopts.empty());
  EXPECT_EQ(Events(id).size(), events);
}

TEST_F(JobRecoveryTest, AnAttemptThatWasBeingStoppedIsWatchedAgainAndKilled) {
  const std::string id = StoredRunning();
  {
    auto lock = table_->Lock();
    Job& j = *table_->jobs().at(id);
    attempts_->Fail(j, "rank 1 died", true);  // RESTARTING; its processes were being stopped
  }
  now_ms_ += 1000;
  ASSERT_TRUE(Restart().ok());
  Job* j = Find(id);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state, v1::RESTARTING);
  EXPECT_EQ(j->draining_attempt, 1);
  EXPECT_EQ(j->kill_at_ms, now_ms_);
  EXPECT_EQ(j->next_launch_ms, now_ms_);
  ASSERT_EQ(launcher_.adopts.size(), 1u);
}

}  // namespace
}  // namespace shardd::testing
