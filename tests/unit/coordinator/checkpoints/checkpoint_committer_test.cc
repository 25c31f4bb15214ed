// The coordinator's commit step: a step commits only when every shard is
// reported and the files on disk have the reported sizes; COMMITTED then
// lists every file and parses back; bad reports are refused naming the file;
// Reset (a new attempt) forgets partial steps; retention keeps keep_last.
#include "coordinator/checkpoints/checkpoint_committer.h"

#include <gtest/gtest.h>

#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

class CheckpointCommitterTest : public ScratchTest {
 protected:
  std::string StepDir(int64_t step) const { return Path("job/" + shard::StepDirName(step)); }
  uint64_t SizeOf(int shard_rank) const { return 64 + 8 * shard_rank; }
  // Writes every shard file of the step with the sizes reports will claim.
  void WriteShards(int64_t step, int shard_count) {
    for (int sr = 0; sr < shard_count; ++sr)
      WriteBytes(StepDir(step) + "/" + shard::ShardFileName(sr, shard_count), std::string(SizeOf(sr), 's'));
  }
  ShardReport Report(int64_t step, int shard_rank, int shard_count, int world = 0) const {
    shard::Manifest base;
    base.job = "job";
    base.step = step;
    base.world = world > 0 ? world : shard_count;
    base.strategy = "full_shard";
    base.shard_count = shard_count;
    base.samples_seen = step * 16;
    base.global_batch = 16;        // a manifest must be in range (issue 18 item 2)
    base.units = {{"embed", 10}};
    ShardReport r;
    r.rank = shard_rank;
    r.step = step;
    r.step_dir = StepDir(step);
    r.manifest_base = base.ToJson();
    r.files.push_back({shard::ShardFileName(shard_rank, shard_count), shard_rank, SizeOf(shard_rank),
                       0xabc0u + static_cast<uint64_t>(shard_rank)});
    return r;
  }
  // Commits a whole step; fails the test if it does not commit.
  void Commit(CheckpointCommitter& c, int64_t step, int shard_count) {
    WriteShards(step, shard_count);
    for (int sr = 0; sr < shard_count; ++sr) {
      auto r = c.Add(Report(step, sr, shard_count));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r->has_value(), sr == shard_count - 1) << "shard " << sr;
      if (r->has_value()) {
        ASSERT_TRUE(CheckpointCommitter::Retain(StepDir(step), c.keep_last(), (*r)->run_fingerprint).ok());
      }
    }
  }
};

TEST_F(CheckpointCommitterTest, PartialStepDoesNotCommit) {
  CheckpointCommitter c(3);
  WriteShards(10, 3);
  for (int sr : {2, 0}) {
    auto r = c.Add(Report(10, sr, 3));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->has_value());
  }
  EXPECT_EQ(c.pending_steps(), 1u);
  EXPECT_FALSE(fs::exists(StepDir(10) + "/COMMITTED"));
}

TEST_F(CheckpointCommitterTest, CompleteStepWritesAParseableCommittedWithEveryFile) {
  CheckpointCommitter c(3);
  WriteShards(10, 3);
  // A rank that writes no shard (a replica) reports without files.
  ShardReport replica = Report(10, 0, 3, /*world=*/6);
  replica.rank = 5;
  replica.files.clear();
  ASSERT_TRUE(c.Add(replica).ok());
  std::optional<shard::Manifest> done;
  for (int sr : {1, 2, 0}) {
    auto r = c.Add(Report(10, sr, 3, /*world=*/6));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    done = *r;
  }
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(c.pending_steps(), 0u);
  auto m = shard::Manifest::FromJson(ReadBytes(StepDir(10) + "/COMMITTED"), "COMMITTED");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->step, 10);
  EXPECT_EQ(m->world, 6);
  EXPECT_EQ(m->samples_seen, 160);
  ASSERT_EQ(m->files.size(), 3u);
  for (int sr = 0; sr < 3; ++sr) {
    EXPECT_EQ(m->files[sr].name, shard::ShardFileName(sr, 3));
    EXPECT_EQ(m->files[sr].shard_rank, sr);
    EXPECT_EQ(m->files[sr].size, SizeOf(sr));
    EXPECT_EQ(m->files[sr].xxh64, 0xabc0u + sr);
  }
  EXPECT_EQ(done->files.size(), 3u);
}

TEST_F(CheckpointCommitterTest, SizeMismatchOrMissingFileIsDataLossNamingTheFile) {
  CheckpointCommitter c(3);
  WriteShards(4, 2);
  const std::string f1 = StepDir(4) + "/" + shard::ShardFileName(1, 2);
  WriteBytes(f1, "short");
  ASSERT_TRUE(c.Add(Report(4, 0, 2)).ok());
  auto r = c.Add(Report(4, 1, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(r.status().message(), f1)) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "5 bytes")) << r.status().ToString();
  EXPECT_FALSE(fs::exists(StepDir(4) + "/COMMITTED"));
  EXPECT_EQ(c.pending_steps(), 0u);

  fs::remove(f1);
  ASSERT_TRUE(c.Add(Report(4, 0, 2)).ok());
  r = c.Add(Report(4, 1, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(r.status().message(), "missing")) << r.status().ToString();
}

TEST_F(CheckpointCommitterTest, BadReportsAreInvalidArgument) {
  CheckpointCommitter c(3);
  WriteShards(4, 2);

  ShardReport wrong_name = Report(4, 0, 2);
  wrong_name.files[0].name = "../../etc/passwd";
  auto r = c.Add(wrong_name);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status().message(), "../../etc/passwd")) << r.status().ToString();

  ShardReport out_of_range = Report(4, 1, 2);
  out_of_range.files[0].shard_rank = 2;
  EXPECT_EQ(c.Add(out_of_range).status().code(), StatusCode::kInvalidArgument);

  ShardReport other_layout = Report(4, 0, 2);
  other_layout.files[0].name = shard::ShardFileName(0, 4);
  EXPECT_EQ(c.Add(other_layout).status().code(), StatusCode::kInvalidArgument);

  ShardReport step_mismatch = Report(4, 0, 2);
  step_mismatch.step = 5;
  EXPECT_EQ(CheckpointCommitter(3).Add(step_mismatch).status().code(), StatusCode::kInvalidArgument);

  ShardReport bad_json = Report(4, 0, 2);
  bad_json.manifest_base = "{";
  EXPECT_FALSE(CheckpointCommitter(3).Add(bad_json).ok());

  ASSERT_TRUE(c.Add(Report(4, 0, 2)).ok());
  ShardReport other_dir = Report(4, 1, 2);
  other_dir.step_dir = Path("job/elsewhere");
  r = c.Add(other_dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status().message(), "elsewhere")) << r.status().ToString();
  EXPECT_FALSE(fs::exists(StepDir(4) + "/COMMITTED"));
}

TEST_F(CheckpointCommitterTest, ResetForgetsPartialSteps) {
  CheckpointCommitter c(3);
  WriteShards(6, 2);
  ASSERT_TRUE(c.Add(Report(6, 0, 2)).ok());
  c.Reset();
  EXPECT_EQ(c.pending_steps(), 0u);
  auto r = c.Add(Report(6, 1, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value()) << "a report of the previous attempt completed the step";
  EXPECT_FALSE(fs::exists(StepDir(6) + "/COMMITTED"));
}

// Writers go in step order: once a step commits, older partial steps can
// never complete and are dropped.
TEST_F(CheckpointCommitterTest, ACommitDropsOlderPartialSteps) {
  CheckpointCommitter c(5);
  WriteShards(1, 2);
  ASSERT_TRUE(c.Add(Report(1, 0, 2)).ok());
  Commit(c, 2, 2);
  EXPECT_EQ(c.pending_steps(), 0u);
}

// The tiers commit apart (checkpoint.memory): a memory step completing while a
// disk step's shards are still arriving (each tier saves on its own schedule)
// must not drop that disk step; a newer step of the same tier still does.
TEST_F(CheckpointCommitterTest, AMemoryCommitKeepsTheDiskStepInFlight) {
  CheckpointCommitter c(5);
  WriteShards(200, 2);
  ASSERT_TRUE(c.Add(Report(200, 0, 2)).ok());  // disk step 200: one shard of two so far
  WriteShards(205, 2);
  for (int sr = 0; sr < 2; ++sr) {
    ShardReport r = Report(205, sr, 2);
    r.tier = shard::CheckpointTier::kMemory;
    auto done = c.Add(r);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->has_value(), sr == 1);
  }
  EXPECT_EQ(c.pending_steps(), 1u) << "the memory commit dropped the disk step in flight";
  auto disk = c.Add(Report(200, 1, 2));
  ASSERT_TRUE(disk.ok()) << disk.status().ToString();
  EXPECT_TRUE(disk->has_value()) << "disk step 200 did not commit after its last shard";
  EXPECT_TRUE(fs::exists(StepDir(200) + "/COMMITTED"));
  // Same tier, same rule as before: a newer memory commit drops an older partial memory step.
  ShardReport partial = Report(210, 0, 2);
  partial.tier = shard::CheckpointTier::kMemory;
  WriteShards(210, 2);
  ASSERT_TRUE(c.Add(partial).ok());
  WriteShards(215, 1);
  ShardReport whole = Report(215, 0, 1);
  whole.tier = shard::CheckpointTier::kMemory;
  ASSERT_TRUE(c.Add(whole).ok());
  EXPECT_EQ(c.pending_steps(), 0u);
}

TEST_F(CheckpointCommitterTest, RetentionKeepsTheNewestKeepLastSteps) {
  CheckpointCommitter c(2);
  // Add alone commits and deletes nothing: retention is the caller's, off its lock.
  WriteShards(10, 1);
  WriteShards(20, 1);
  WriteShards(30, 1);
  for (int64_t step : {10, 20, 30}) ASSERT_TRUE(c.Add(Report(step, 0, 1)).ok());
  EXPECT_TRUE(fs::exists(StepDir(10) + "/COMMITTED")) << "Add applied retention";
  for (int64_t step : {10, 20, 30}) fs::remove_all(StepDir(step));
  for (int64_t step : {10, 20, 30}) Commit(c, step, 2);
  EXPECT_FALSE(fs::exists(StepDir(10))) << "retention kept the oldest step";
  EXPECT_TRUE(fs::exists(StepDir(20) + "/COMMITTED"));
  EXPECT_TRUE(fs::exists(StepDir(30) + "/COMMITTED"));
  Commit(c, 40, 2);
  EXPECT_FALSE(fs::exists(StepDir(20)));
  EXPECT_TRUE(fs::exists(StepDir(40) + "/COMMITTED"));
}

}  // namespace
}  // namespace shardd::testing
