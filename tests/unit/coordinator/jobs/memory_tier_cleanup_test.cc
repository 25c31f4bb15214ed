// The memory tier's job folders across jobs and coordinator restarts (issue
// 39 item 4): two jobs of one name and workdir get folders of their own; an
// ended job's folder is removed once, recorded in the state store, and a
// restarted coordinator (JobRecovery over the same store) does not remove it
// again; a folder a job that has not ended still uses is never removed; a job
// stored by an older version (no memory_dir column) keeps its folder.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "coordinator/jobs/control_loop.h"
#include "coordinator/jobs/job_recovery.h"
#include "shard/ckpt/catalog.h"
#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

class MemoryTierCleanupTest : public JobPartsTest {
 protected:
  void SetUp() override {
    JobPartsTest::SetUp();
    loop_ = std::make_unique<ControlLoop>(opts_, table_.get(), runner_.get(), attempts_.get(), sched_.get(),
                                          &rendezvous_);
  }
  // A local job with the memory tier in its job file (so a restarted
  // coordinator parses it with the tier too), memory.dir `mem_dir`.
  Job& MemoryJob(const std::string& name = "tiny", const std::string& mem_dir = "") {
    Job& j = AddJob(name);
    std::string yaml = j.spec.yaml();
    const std::string from = "checkpoint: {dir: ckpt, every_steps: 5, keep_last: 2}";
    yaml.replace(yaml.find(from), from.size(),
                 "checkpoint: {dir: ckpt, every_steps: 5, keep_last: 2, memory: {every_steps: 5, dir: " +
                     (mem_dir.empty() ? Path("shm") : mem_dir) + "}}");
    j.spec.set_yaml(yaml);
    auto config = shard::ParseJobConfig(yaml, "jobs/" + name + ".yaml", {});
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    j.config = *config;
    return j;
  }
  // Ends the job (its processes gone) with `state`, records it, and ticks.
  void End(Job& j, v1::JobState state) {
    {
      auto lock = table_->Lock();
      attempts_->End(j);
      table_->SetState(j, state, "ended", "test");
    }
    launcher_.SetRunning(j.id, j.attempt, 0);
  }
  // A fresh set of parts over the same store, recovered, with a new loop.
  void Restart() {
    loop_.reset();
    Build();
    JobRecovery recovery(opts_, table_.get(), runner_.get(), sched_.get());
    ASSERT_TRUE(recovery.Recover().ok());
    // The ended attempts' processes are gone (the launcher was asked again).
    for (const FakeLauncher::AdoptCall& a : launcher_.adopts) launcher_.SetRunning(a.job_id, a.attempt, 0);
    loop_ = std::make_unique<ControlLoop>(opts_, table_.get(), runner_.get(), attempts_.get(), sched_.get(),
                                          &rendezvous_);
  }
  Job& Find(const std::string& id) {
    auto lock = table_->Lock();
    return **table_->Find(id);
  }
  int Count(const std::string& id, const std::string& kind) {
    int n = 0;
    for (const EventRecord& e : Events(id)) n += e.kind == kind;
    return n;
  }
  std::unique_ptr<ControlLoop> loop_;
};

TEST_F(MemoryTierCleanupTest, TwoJobsOfOneNameAndWorkdirGetFoldersOfTheirOwn) {
  Job& a = MemoryJob();
  Job& b = MemoryJob();
  ASSERT_NE(a.id, b.id);
  EXPECT_NE(MemoryTierDirOf(a), MemoryTierDirOf(b));
  EXPECT_EQ(MemoryTierDirOf(a).rfind(Path("shm") + "/" + a.id + "-", 0), 0u) << MemoryTierDirOf(a);
  EXPECT_EQ(MemoryTierDirOf(b).rfind(Path("shm") + "/" + b.id + "-", 0), 0u) << MemoryTierDirOf(b);
}

TEST_F(MemoryTierCleanupTest, AnEndedJobsFolderIsRemovedOnceAcrossRestarts) {
  Job& j = MemoryJob();
  const std::string id = j.id, mem = MemoryTierDirOf(j);
  loop_->Tick();  // attempt 1
  WriteBytes(mem + "/" + shard::StepDirName(5) + "/x", "shard");
  End(j, v1::SUCCEEDED);
  loop_->Tick();
  EXPECT_FALSE(fs::exists(mem));
  EXPECT_EQ(Count(id, "memory_tier_removed"), 1);
  // Something new at that path after the cleanup (here a stand-in for any
  // file): a restarted coordinator leaves it alone, and says nothing again.
  WriteBytes(mem + "/" + shard::StepDirName(10) + "/x", "not the ended job's any more");
  for (int restart = 0; restart < 2; ++restart) {
    Restart();
    EXPECT_EQ(MemoryTierDirOf(Find(id)), mem) << "the folder is stored with the job";
    loop_->Tick();
    loop_->Tick();
    EXPECT_TRUE(fs::exists(mem + "/" + shard::StepDirName(10) + "/x")) << "removed again after restart " << restart;
    EXPECT_EQ(Count(id, "memory_tier_removed"), 1);
  }
}

TEST_F(MemoryTierCleanupTest, ARestartRemovesWhatTheStoppedCoordinatorHadNotYetAndRecordsIt) {
  Job& j = MemoryJob();
  const std::string id = j.id, mem = MemoryTierDirOf(j);
  loop_->Tick();
  WriteBytes(mem + "/" + shard::StepDirName(5) + "/x", "shard");
  End(j, v1::FAILED);  // the coordinator stops before its next Tick
  Restart();
  loop_->Tick();
  loop_->Tick();
  EXPECT_FALSE(fs::exists(mem));
  EXPECT_EQ(Count(id, "memory_tier_removed"), 1);
  WriteBytes(mem + "/y", "new");
  Restart();
  loop_->Tick();
  EXPECT_TRUE(fs::exists(mem + "/y"));
  EXPECT_EQ(Count(id, "memory_tier_removed"), 1);
}

TEST_F(MemoryTierCleanupTest, ALiveJobsStepsSurviveAnEndedJobOfTheSameNameAndWorkdir) {
  Job& old_job = MemoryJob();
  loop_->Tick();
  End(old_job, v1::CANCELLED);
  Job& live = MemoryJob();  // the same name, workdir and memory.dir, submitted after
  const std::string live_step = MemoryTierDirOf(live) + "/" + shard::StepDirName(5) + "/x";
  WriteBytes(live_step, "the live job's memory step");
  for (int restart = 0; restart < 2; ++restart) {
    loop_->Tick();
    loop_->Tick();
    EXPECT_TRUE(fs::exists(live_step)) << "restart " << restart;
    Restart();
  }
}

TEST_F(MemoryTierCleanupTest, AFolderALiveJobUsesIsKeptWithAnEventSayingWhy) {
  Job& ended = MemoryJob("a");
  const std::string ended_dir = MemoryTierDirOf(ended);
  Job& live = MemoryJob("b", ended_dir);  // its memory.dir: inside the other job's folder
  const std::string live_step = MemoryTierDirOf(live) + "/" + shard::StepDirName(5) + "/x";
  WriteBytes(live_step, "the live job's memory step");
  End(ended, v1::SUCCEEDED);
  loop_->Tick();
  EXPECT_TRUE(fs::exists(live_step));
  bool said = false;
  for (const EventRecord& e : Events(ended.id))
    said |= e.kind == "memory_tier_removed" && e.message.find("job " + live.id + ", which has not ended") !=
                                                   std::string::npos;
  EXPECT_TRUE(said);
}

// A database of the version before: jobs without memory_dir and
// memory_tier_removed. It opens, a stored job keeps the name-and-workdir
// folder it had (its workers wrote there), and its cleanup is then recorded.
TEST_F(MemoryTierCleanupTest, AJobStoredByAnOlderVersionKeepsItsFolderAndIsCleanedOnce) {
  Job& j = MemoryJob();
  const std::string id = j.id;
  const std::string legacy = shard::MemoryCheckpointJobDir(j.config, j.spec.workdir());
  {
    auto lock = table_->Lock();
    table_->SetState(j, v1::SUCCEEDED, "succeeded", "test");  // stored; its processes never ran
  }
  store_.reset();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((Path("state") + "/shardd.db").c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    // The version before recorded no schema version (user_version 0).
    ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE jobs DROP COLUMN memory_dir; ALTER TABLE jobs DROP COLUMN "
                               "memory_tier_removed; PRAGMA user_version = 0;", nullptr, nullptr, &err), SQLITE_OK)
        << (err ? err : "");
    sqlite3_close(db);
  }
  auto s = StateStore::Open(Path("state"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  store_ = std::move(*s);
  WriteBytes(legacy + "/" + shard::StepDirName(5) + "/x", "the old version's step");
  Restart();
  EXPECT_EQ(MemoryTierDirOf(Find(id)), legacy);
  loop_->Tick();
  EXPECT_FALSE(fs::exists(legacy));
  WriteBytes(legacy + "/y", "new");
  Restart();
  loop_->Tick();
  EXPECT_TRUE(fs::exists(legacy + "/y"));
  EXPECT_EQ(Count(id, "memory_tier_removed"), 1);
}

}  // namespace
}  // namespace shardd::testing
