// The two checkpoint tiers (shard/ckpt/checkpoint_tier.h): which tier's step a
// restart takes, the memory tier's drop below the newest disk step, and the
// removal of the memory folder when a job ends. Steps are made through the
// real protocol in two scratch folders standing for checkpoint.dir and tmpfs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shard/ckpt/checkpoint_tier.h"
#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard::ckpt_testing {
namespace {

class CheckpointTierTest : public ProtocolTest {
 protected:
  std::string Disk() const { return Path("disk/job"); }
  std::string Memory() const { return Path("shm/job-0123"); }
  std::vector<int64_t> Steps(const std::string& dir) const {
    std::vector<int64_t> out;
    auto steps = ListSteps(dir);
    EXPECT_TRUE(steps.ok());
    for (const auto& s : *steps) out.push_back(s.step);
    return out;
  }
};

TEST_F(CheckpointTierTest, NamesRoundTrip) {
  CheckpointTier t = CheckpointTier::kMemory;
  EXPECT_STREQ(CheckpointTierName(CheckpointTier::kDisk), "disk");
  EXPECT_STREQ(CheckpointTierName(CheckpointTier::kMemory), "memory");
  ASSERT_TRUE(ParseCheckpointTier("", &t));  // an older worker: disk
  EXPECT_EQ(t, CheckpointTier::kDisk);
  ASSERT_TRUE(ParseCheckpointTier("memory", &t));
  EXPECT_EQ(t, CheckpointTier::kMemory);
  EXPECT_FALSE(ParseCheckpointTier("ram", &t));
}

TEST_F(CheckpointTierTest, NewerMemoryStepWins) {
  MakeCommittedStep(Disk(), 200, 2);
  MakeCommittedStep(Memory(), 205, 2);
  MakeCommittedStep(Memory(), 210, 2);
  auto t = FindLatestGoodTieredStep(Disk(), Memory(), /*verify_checksums=*/true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->step, 210);
  EXPECT_EQ(t->tier, CheckpointTier::kMemory);
  EXPECT_EQ(t->dir, Memory() + "/" + StepDirName(210));
}

TEST_F(CheckpointTierTest, NewerDiskStepWins) {
  MakeCommittedStep(Memory(), 195, 2);
  MakeCommittedStep(Disk(), 200, 2);
  auto t = FindLatestGoodTieredStep(Disk(), Memory(), true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->step, 200);
  EXPECT_EQ(t->tier, CheckpointTier::kDisk);
}

TEST_F(CheckpointTierTest, DamagedMemoryStepFallsBackToTheOlderGoodOneOrDisk) {
  MakeCommittedStep(Disk(), 200, 2);
  MakeCommittedStep(Memory(), 205, 2);
  const std::string broken = MakeCommittedStep(Memory(), 210, 2);
  FlipByte(broken + "/" + ShardFileName(1, 2), -3);
  auto t = FindLatestGoodTieredStep(Disk(), Memory(), true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->step, 205);
  EXPECT_EQ(t->tier, CheckpointTier::kMemory);
  fs::remove_all(Memory() + "/" + StepDirName(205));  // the tmpfs lost it too
  t = FindLatestGoodTieredStep(Disk(), Memory(), true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->step, 200);
  EXPECT_EQ(t->tier, CheckpointTier::kDisk);
}

TEST_F(CheckpointTierTest, NoMemoryTierOrNothingCommitted) {
  MakeCommittedStep(Memory(), 205, 1);  // a memory tier the caller does not use
  MakeCommittedStep(Disk(), 100, 1);
  auto t = FindLatestGoodTieredStep(Disk(), "", true);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->step, 100);
  auto none = FindLatestGoodTieredStep(Path("nothing"), Path("nothing_shm"), true);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  // Only a memory step: it is taken.
  auto mem_only = FindLatestGoodTieredStep(Path("nothing"), Memory(), true);
  ASSERT_TRUE(mem_only.ok()) << mem_only.status().ToString();
  EXPECT_EQ(mem_only->tier, CheckpointTier::kMemory);
}

TEST_F(CheckpointTierTest, TheFilterAppliesToBothTiers) {
  MakeCommittedStep(Disk(), 200, 1, "00000000000000bb");
  MakeCommittedStep(Memory(), 205, 1, "00000000000000aa");  // another run's
  auto t = FindLatestGoodTieredStep(Disk(), Memory(), true,
                                    [](const Manifest& m) { return m.run_fingerprint == "00000000000000bb"; });
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->step, 200);
  EXPECT_EQ(t->tier, CheckpointTier::kDisk);
}

TEST_F(CheckpointTierTest, DropsThisRunsMemoryStepsBelowTheDiskStep) {
  MakeCommittedStep(Memory(), 190, 1, "00000000000000bb");
  MakeCommittedStep(Memory(), 195, 1, "00000000000000bb");
  MakePartialStep(Memory(), 198, 1);
  MakeCommittedStep(Memory(), 197, 1, "00000000000000aa");  // another run's: stays
  MakeCommittedStep(Memory(), 205, 1, "00000000000000bb");  // newer than the disk step: stays
  ASSERT_TRUE(DropMemoryStepsBefore(Memory(), 200, "00000000000000bb").ok());
  EXPECT_EQ(Steps(Memory()), (std::vector<int64_t>{197, 205}));
  ASSERT_TRUE(DropMemoryStepsBefore(Memory(), 200, "00000000000000bb").ok()) << "idempotent";
  ASSERT_TRUE(DropMemoryStepsBefore(Path("missing"), 200, "").ok()) << "no folder: nothing to drop";
}

TEST_F(CheckpointTierTest, RemoveMemoryTierRemovesTheFolderNeverThroughALink) {
  MakeCommittedStep(Memory(), 5, 1);
  ASSERT_TRUE(RemoveMemoryTier(Memory()).ok());
  EXPECT_FALSE(fs::exists(Memory()));
  ASSERT_TRUE(RemoveMemoryTier(Memory()).ok()) << "already gone";
  ASSERT_TRUE(RemoveMemoryTier("").ok());
  // A link in its place is removed as a link: what it leads to stays.
  MakeCommittedStep(Disk(), 10, 1);
  fs::create_directories(fs::path(Memory()).parent_path());
  fs::create_directory_symlink(Disk(), Memory());
  ASSERT_TRUE(RemoveMemoryTier(Memory()).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(Memory())));
  EXPECT_TRUE(CheckpointReader::Open(Disk() + "/" + StepDirName(10), true).ok());
}

}  // namespace
}  // namespace shard::ckpt_testing
