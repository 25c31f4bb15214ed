// The job table alone: every state change is one stored transaction (the
// event and the job's record), watchers hear only their job, live progress is
// not stored, fencing refuses every call that is not the current attempt's,
// and a blackout of the job lock is forgiven to the ranks' clocks.
#include "coordinator/jobs/job_table.h"

#include <gtest/gtest.h>

#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

using JobTableTest = JobPartsTest;

TEST_F(JobTableTest, NumbersJobsAfterTheStoredOnes) {
  auto lock = table_->Lock();
  table_->set_next_job_number(7);
  EXPECT_EQ(table_->NewJobId("tiny"), "tiny-7");
  EXPECT_EQ(table_->NewJobId("other"), "other-8");
}

TEST_F(JobTableTest, AStateChangeStoresTheEventAndTheRecordTogether) {
  Job& j = AddJob();
  {
    auto lock = table_->Lock();
    now_ms_ += 1500;
    table_->SetState(j, v1::FAILED, "failed", "it broke");
  }
  const std::vector<EventRecord> events = Events(j.id);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].seq, 1);
  EXPECT_EQ(events[0].kind, "failed");
  EXPECT_EQ(events[0].message, "it broke");
  EXPECT_EQ(events[0].unix_ms, now_ms_);
  auto jobs = store_->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state, v1::FAILED);
  EXPECT_EQ((*jobs)[0].reason, "it broke");
  EXPECT_EQ((*jobs)[0].seq, 1);
  EXPECT_EQ(j.updated_ms, now_ms_);
}

TEST_F(JobTableTest, WatchersHearOnlyTheirJobAndLiveProgressIsNotStored) {
  Job& a = AddJob("a");
  Job& b = AddJob("b");
  std::vector<std::string> heard;
  auto lock = table_->Lock();
  const int64_t w = table_->AddWatcher(a.id, [&](const v1::JobEvent& ev) { heard.push_back(ev.kind()); });
  table_->Emit(a, "one", "");
  table_->Emit(b, "other", "");
  v1::JobEvent progress;
  progress.set_job_id(a.id);
  progress.set_kind("progress");
  table_->Publish(progress);
  table_->RemoveWatcher(w);
  table_->Emit(a, "after", "");
  lock.unlock();
  EXPECT_EQ(heard, (std::vector<std::string>{"one", "progress"}));
  EXPECT_EQ(Events(a.id).size(), 2u);  // "one" and "after"; the progress event was live only
}

TEST_F(JobTableTest, StatusOfNamesTheJobDirAndRanks) {
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  const v1::JobStatus s = table_->StatusOf(j);
  EXPECT_EQ(s.id(), j.id);
  EXPECT_EQ(s.state(), v1::LAUNCHING);
  EXPECT_EQ(s.job_dir(), Path("state") + "/jobs/" + j.id);
  EXPECT_EQ(s.checkpoint_dir(), Path("work") + "/ckpt/tiny");
  ASSERT_EQ(s.workers_size(), 2);
  EXPECT_EQ(s.workers(1).last_heartbeat_age_s(), -1.0);  // not registered
}

TEST_F(JobTableTest, FencingRefusesEveryCallButTheCurrentAttempts) {
  Job& j = AddJob();
  const std::string first = Begin(j).env.at("SHARDD_WORKER_TOKEN");
  {
    auto lock = table_->Lock();
    attempts_->Fail(j, "test", true);
    j.state = v1::QUEUED;  // as if the backoff were over
  }
  const std::string second = Begin(j).env.at("SHARDD_WORKER_TOKEN");
  auto lock = table_->Lock();
  EXPECT_TRUE(table_->CheckWorker(Worker(j.id, 2, 1), second).ok());
  EXPECT_EQ(table_->CheckWorker(Worker(j.id, 1, 0), first).status().code(), shard::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table_->CheckWorker(Worker(j.id, 2, 0), "nope").status().code(), shard::StatusCode::kUnauthenticated);
  EXPECT_EQ(table_->CheckWorker(Worker(j.id, 1, 0), second).status().code(), shard::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table_->CheckWorker(Worker(j.id, 2, 2), second).status().code(), shard::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->CheckWorker(Worker("nobody-1", 2, 0), second).status().code(), shard::StatusCode::kNotFound);
  j.state = v1::RESTARTING;
  EXPECT_EQ(table_->CheckWorker(Worker(j.id, 2, 0), second).status().code(), shard::StatusCode::kAborted);
}

TEST_F(JobTableTest, ABlackoutOfTheLockIsForgivenToTheRanksClocks) {
  opts_.stall_forgive_s = 5;
  Job& j = AddJob();
  Begin(j);
  auto lock = table_->Lock();
  table_->NoteAlive(now_ms_);
  const int64_t before = j.ranks[0].last_heartbeat_ms;
  const int64_t launched = j.ranks[1].launched_ms;
  now_ms_ += 2000;
  table_->NoteAlive(now_ms_);  // under the limit: nothing moves
  EXPECT_EQ(j.ranks[0].last_heartbeat_ms, before);
  now_ms_ += 30000;
  table_->NoteAlive(now_ms_);
  EXPECT_EQ(j.ranks[0].last_heartbeat_ms, before + 30000);
  EXPECT_EQ(j.ranks[1].launched_ms, launched + 30000);
}

}  // namespace
}  // namespace shardd::testing
