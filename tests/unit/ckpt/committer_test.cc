// The commit protocol and retention. CommitStep writes COMMITTED only once
// every shard of the step has reported, gives up after its timeout saying how
// many (and which) shards are missing, and ignores reports that belong to
// another layout of the same step (leftovers of a crashed attempt). Retention
// keeps the newest K committed steps and never touches the newest committed
// step or anything newer (a save may be in flight).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard {
namespace {

using namespace ckpt_testing;
using std::chrono::milliseconds;

class CommitterTest : public ProtocolTest {};

TEST_F(CommitterTest, ReportsRoundTrip) {
  const std::string step = Path("step_00000001");
  fs::create_directories(step);
  WrittenFile wf{"rank_00001-of-00002.shard", 1234, 0xabcdef0123456789ull};
  ASSERT_TRUE(WriteShardReport(step, wf, 1).ok());
  EXPECT_TRUE(fs::exists(step + "/rank_00001-of-00002.shard.report"));
  auto reports = ReadShardReports(step);
  ASSERT_TRUE(reports.ok());
  ASSERT_EQ(reports->size(), 1u);
  EXPECT_EQ((*reports)[0].name, wf.name);
  EXPECT_EQ((*reports)[0].shard_rank, 1);
  EXPECT_EQ((*reports)[0].size, 1234u);
  EXPECT_EQ((*reports)[0].xxh64, 0xabcdef0123456789ull);
}

TEST_F(CommitterTest, MalformedReportIsAnErrorNamingIt) {
  const std::string step = Path("step_00000001");
  fs::create_directories(step);
  WriteBytes(step + "/rank_00000-of-00001.shard.report", "{\"name\": 3}");
  auto r = ReadShardReports(step);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank_00000-of-00001.shard.report"), std::string::npos) << r.status().ToString();
}

// Writers report one by one from other threads, well after the committer
// started waiting: COMMITTED appears only after the last report, and lists
// every file with its size and checksum.
TEST_F(CommitterTest, CommitWaitsForEveryReport) {
  const std::string job = Path("job");
  const std::string step = job + "/" + StepDirName(4);
  fs::create_directories(step);
  std::vector<WrittenFile> written;
  for (int r = 0; r < 3; ++r) written.push_back(WriteShard(step, 4, r, 3));
  std::atomic<int> reported{0};
  std::thread writers([&] {
    for (int r : {2, 0, 1}) {
      std::this_thread::sleep_for(milliseconds(150));
      EXPECT_FALSE(fs::exists(step + "/COMMITTED")) << "committed before shard " << r << " reported";
      ASSERT_TRUE(WriteShardReport(step, written[r], r).ok());
      ++reported;
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  Status st = CommitStep(step, BaseManifest(4, 3), milliseconds(10000));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  writers.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(reported.load(), 3);
  EXPECT_GE(waited, 0.4);
  auto m = Manifest::FromJson(ReadBytes(step + "/COMMITTED"), "COMMITTED");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->files.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(m->files[r].name, ShardFileName(r, 3));
    EXPECT_EQ(m->files[r].shard_rank, r);
    EXPECT_EQ(m->files[r].size, written[r].size);
    EXPECT_EQ(m->files[r].xxh64, written[r].xxh64);
  }
  EXPECT_EQ(m->step, 4);
  EXPECT_EQ(m->samples_seen, 32);
  EXPECT_TRUE(CheckpointReader::Open(step, true).ok());
}

TEST_F(CommitterTest, TimesOutNamingTheMissingShards) {
  const std::string step = Path("job/" + StepDirName(9));
  fs::create_directories(step);
  for (int r : {0, 2}) ASSERT_TRUE(WriteShardReport(step, WriteShard(step, 9, r, 4), r).ok());
  auto t0 = std::chrono::steady_clock::now();
  Status st = CommitStep(step, BaseManifest(9, 4), milliseconds(300));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_GE(waited, 0.29);
  EXPECT_LT(waited, 5.0);
  EXPECT_NE(st.message().find(step), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("2 of 4"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("missing shards 1, 3"), std::string::npos) << st.ToString();
  EXPECT_FALSE(fs::exists(step + "/COMMITTED"));
}

// A crashed attempt at world 2 left both shards and their reports of step 6
// (killed just before COMMITTED). The job resumes at world 1 and saves step 6
// again: the commit must list exactly the new single shard, not the stale
// ones (which would make a manifest of 3 files for 1 shard: a "committed"
// step that can never be read).
TEST_F(CommitterTest, StaleReportsOfAnotherLayoutAreIgnored) {
  const std::string job = Path("job");
  const std::string step = job + "/" + StepDirName(6);
  fs::create_directories(step);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(WriteShardReport(step, WriteShard(step, 6, r, 2), r).ok());
  // The new attempt, one shard.
  WrittenFile wf = WriteShard(step, 6, 0, 1);
  ASSERT_TRUE(WriteShardReport(step, wf, 0).ok());
  Status st = CommitStep(step, BaseManifest(6, 1), milliseconds(2000));
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto reader = CheckpointReader::Open(step, true);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_EQ(reader->manifest().files.size(), 1u);
  EXPECT_EQ(reader->manifest().files[0].name, ShardFileName(0, 1));
  EXPECT_EQ(reader->manifest().files[0].xxh64, wf.xxh64);
}

// The other direction: a stale world-1 report must not stand in for one of
// the two shards of the new attempt; the commit waits for the real report.
TEST_F(CommitterTest, StaleReportDoesNotCountTowardsANewLayout) {
  const std::string step = Path("job/" + StepDirName(6));
  fs::create_directories(step);
  ASSERT_TRUE(WriteShardReport(step, WriteShard(step, 6, 0, 1), 0).ok());
  ASSERT_TRUE(WriteShardReport(step, WriteShard(step, 6, 0, 2), 0).ok());
  Status st = CommitStep(step, BaseManifest(6, 2), milliseconds(200));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("missing shards 1"), std::string::npos) << st.ToString();
  ASSERT_TRUE(WriteShardReport(step, WriteShard(step, 6, 1, 2), 1).ok());
  ASSERT_TRUE(CommitStep(step, BaseManifest(6, 2), milliseconds(200)).ok());
  auto reader = CheckpointReader::Open(step, true);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->manifest().files.size(), 2u);
}

// ---- Retention ----------------------------------------------------------------

class RetentionTest : public ProtocolTest {
 protected:
  std::string Job() const { return Path("job"); }
  std::vector<int64_t> Remaining() const {
    std::vector<int64_t> out;
    auto steps = ListSteps(Job());
    EXPECT_TRUE(steps.ok());
    for (const auto& s : *steps) out.push_back(s.step);
    return out;
  }
  std::vector<int64_t> RemainingCommitted() const {
    std::vector<int64_t> out;
    auto steps = ListSteps(Job());
    for (const auto& s : *steps)
      if (s.committed) out.push_back(s.step);
    return out;
  }
};

using Steps = std::vector<int64_t>;

TEST_F(RetentionTest, KeepsTheLastKCommitted) {
  for (int64_t s : {10, 20, 30, 40, 50}) MakeCommittedStep(Job(), s, 2);
  ASSERT_TRUE(ApplyRetention(Job(), 2).ok());
  EXPECT_EQ(Remaining(), (Steps{40, 50}));
  ASSERT_TRUE(ApplyRetention(Job(), 2).ok()) << "idempotent";
  EXPECT_EQ(Remaining(), (Steps{40, 50}));
  ASSERT_TRUE(ApplyRetention(Job(), 5).ok());
  EXPECT_EQ(Remaining(), (Steps{40, 50}));
  ASSERT_TRUE(ApplyRetention(Job(), 1).ok());
  EXPECT_EQ(Remaining(), (Steps{50}));
  // keep_last below 1 still keeps the newest committed step.
  ASSERT_TRUE(ApplyRetention(Job(), 0).ok());
  EXPECT_EQ(Remaining(), (Steps{50}));
  EXPECT_TRUE(CheckpointReader::Open(Job() + "/" + StepDirName(50), true).ok());
}

TEST_F(RetentionTest, DeletesStaleUncommittedOlderThanNewestCommitted) {
  MakeCommittedStep(Job(), 10, 1);
  MakePartialStep(Job(), 15, 1);   // a crashed save between two good ones
  MakeCommittedStep(Job(), 20, 1);
  MakePartialStep(Job(), 25, 1);   // newer than the newest committed: in flight
  fs::create_directories(Job() + "/" + StepDirName(30));  // just created by a writer
  ASSERT_TRUE(ApplyRetention(Job(), 3).ok());
  EXPECT_EQ(Remaining(), (Steps{10, 20, 25, 30}));
  EXPECT_EQ(RemainingCommitted(), (Steps{10, 20}));
  // The in-flight step's files are untouched.
  EXPECT_TRUE(fs::exists(Job() + "/" + StepDirName(25) + "/" + ShardFileName(0, 1)));
}

TEST_F(RetentionTest, NeverDeletesTheNewestCommittedNorNewerDirs) {
  MakeCommittedStep(Job(), 5, 2);
  MakePartialStep(Job(), 6, 2);
  MakePartialStep(Job(), 7, 2);
  ASSERT_TRUE(ApplyRetention(Job(), 1).ok());
  EXPECT_EQ(Remaining(), (Steps{5, 6, 7}));
}

// DESIGN: retention "never deletes the newest good one". With keep_last 1 and
// a damaged newest commit (a shard lost), the older intact step must survive.
TEST_F(RetentionTest, KeepsTheNewestGoodStepWhenNewerOnesAreDamaged) {
  MakeCommittedStep(Job(), 10, 2);
  MakeCommittedStep(Job(), 20, 2);
  const std::string broken = MakeCommittedStep(Job(), 30, 2);
  fs::remove(broken + "/" + ShardFileName(1, 2));
  ASSERT_TRUE(ApplyRetention(Job(), 1).ok());
  EXPECT_EQ(RemainingCommitted(), (Steps{20, 30}));
  auto s = FindLatestGoodStep(Job(), true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, Job() + "/" + StepDirName(20));
}

TEST_F(RetentionTest, WithoutCommittedStepsNothingIsDeleted) {
  MakePartialStep(Job(), 1, 1);
  MakePartialStep(Job(), 2, 1);
  ASSERT_TRUE(ApplyRetention(Job(), 1).ok());
  EXPECT_EQ(Remaining(), (Steps{1, 2}));
  EXPECT_TRUE(ApplyRetention(Path("no-such-job"), 1).ok()) << "a job without checkpoints is fine";
}

TEST_F(RetentionTest, LeavesForeignEntriesAlone) {
  MakeCommittedStep(Job(), 1, 1);
  MakeCommittedStep(Job(), 2, 1);
  for (const char* d : {"step_abc", "step_1", "notes", "step_000000001"}) fs::create_directories(Job() + "/" + d);
  WriteBytes(Job() + "/step_00000000", "a file, not a step directory");
  ASSERT_TRUE(ApplyRetention(Job(), 1).ok());
  EXPECT_EQ(Remaining(), (Steps{2}));
  for (const char* d : {"step_abc", "step_1", "notes", "step_000000001", "step_00000000"})
    EXPECT_TRUE(fs::exists(Job() + "/" + d)) << d;
}

TEST_F(RetentionTest, ListStepsSortsNumericallyAndFlagsCommitted) {
  MakeCommittedStep(Job(), 100, 1);
  MakePartialStep(Job(), 9, 1);
  MakeCommittedStep(Job(), 20, 1);
  auto steps = ListSteps(Job());
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_EQ((*steps)[0].step, 9);
  EXPECT_FALSE((*steps)[0].committed);
  EXPECT_EQ((*steps)[1].step, 20);
  EXPECT_TRUE((*steps)[1].committed);
  EXPECT_EQ((*steps)[2].step, 100);
  EXPECT_EQ((*steps)[2].dir, Job() + "/" + StepDirName(100));
  auto none = ListSteps(Path("missing"));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// Issue 18 item 3: a second run in the same directory had its steps 15 and 30
// deleted because an older run's 40, 60 and 80 were "the newest three".
// Retention counts and deletes only the steps of the run that saves.
TEST_F(RetentionTest, RetentionNeverDeletesAnotherRunsSteps) {
  const std::string a = "00000000000000aa", b = "00000000000000bb";
  for (int64_t s : {40, 60, 80}) MakeCommittedStep(Job(), s, 1, a);
  for (int64_t s : {15, 30}) MakeCommittedStep(Job(), s, 1, b);
  ASSERT_TRUE(ApplyRetention(Job(), 3, b).ok());
  EXPECT_EQ(Remaining(), (std::vector<int64_t>{15, 30, 40, 60, 80})) << "b keeps both of its steps, a all of its";
  ASSERT_TRUE(ApplyRetention(Job(), 1, b).ok());
  EXPECT_EQ(Remaining(), (std::vector<int64_t>{30, 40, 60, 80})) << "b's older step goes, a's steps stay";
  ASSERT_TRUE(ApplyRetention(Job(), 1, a).ok());
  EXPECT_EQ(Remaining(), (std::vector<int64_t>{30, 80}));
}

// The restart search takes a filter: steps of another run are passed over,
// not counted as damaged, and said so when nothing else is left.
TEST_F(RetentionTest, FindLatestGoodStepKeepsToTheRunItIsAskedFor) {
  const std::string a = "00000000000000aa", b = "00000000000000bb";
  MakeCommittedStep(Job(), 30, 1, b);
  MakeCommittedStep(Job(), 80, 1, a);
  auto only_b = [&](const Manifest& m) { return m.run_fingerprint == b; };
  auto s = FindLatestGoodStep(Job(), true, only_b);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, Job() + "/" + StepDirName(30));
  fs::remove_all(Job() + "/" + StepDirName(30));
  auto none = FindLatestGoodStep(Job(), true, only_b);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("1 committed step(s) of another run"), std::string::npos)
      << none.status().message();
}

}  // namespace
}  // namespace shard
