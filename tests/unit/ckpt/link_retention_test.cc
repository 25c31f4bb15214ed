// Checkpoint folders never act through a link. Two runs side by side; run B's
// step folder is a symbolic link to run A's step. Listing, resume and
// retention in B never count a link that leads out of B's directory (A's
// COMMITTED and shard files stay as they are), and a link inside B's
// directory is deleted as a link, never through it.
#include <gtest/gtest.h>

#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard {
namespace {

using namespace ckpt_testing;

class LinkRetentionTest : public ProtocolTest {
 protected:
  void SetUp() override {
    ProtocolTest::SetUp();
    a_ = Path("runs/A");
    b_ = Path("runs/B");
    fs::create_directories(a_);
    fs::create_directories(b_);
  }
  // Every file of step_dir with its bytes, to compare before and after.
  static std::map<std::string, std::string> Contents(const std::string& step_dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(step_dir)) out[e.path().filename().string()] = ReadBytes(e.path().string());
    return out;
  }
  std::string a_, b_;
};

TEST_F(LinkRetentionTest, RetentionInBLeavesAsStepBehindALinkIntact) {
  const std::string a10 = MakeCommittedStep(a_, 10, 2);
  const auto before = Contents(a10);
  ASSERT_TRUE(before.count(kCommittedFile));
  // B's step 10 is A's (an absolute link), B's own steps are newer.
  fs::create_symlink(a10, b_ + "/" + StepDirName(10));
  for (int64_t s : {20, 30, 40}) MakeCommittedStep(b_, s, 2);

  Status st = ApplyRetention(b_, /*keep_last=*/1);
  ASSERT_TRUE(st.ok()) << st.ToString();

  EXPECT_EQ(Contents(a10), before) << "retention in B changed A's step through the link";
  EXPECT_TRUE(CheckpointReader::Open(a10, /*verify_checksums=*/true).ok());
  EXPECT_FALSE(fs::exists(b_ + "/" + StepDirName(20)));
  EXPECT_FALSE(fs::exists(b_ + "/" + StepDirName(30)));
  EXPECT_TRUE(fs::exists(b_ + "/" + StepDirName(40) + "/" + kCommittedFile));
}

TEST_F(LinkRetentionTest, ListingAndResumeIgnoreALinkOutOfTheRun) {
  const std::string a10 = MakeCommittedStep(a_, 10, 1);
  MakeCommittedStep(b_, 20, 1);
  // Newest by name in B, relative, through ".." — still A's step.
  fs::create_symlink("../A/" + StepDirName(10), b_ + "/" + StepDirName(50));
  ASSERT_TRUE(fs::exists(b_ + "/" + StepDirName(50) + "/" + kCommittedFile));

  auto steps = ListSteps(b_);
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ((*steps)[0].step, 20);
  auto latest = FindLatestGoodStep(b_, /*verify_checksums=*/true);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, b_ + "/" + StepDirName(20));
  // A itself is unaffected: its step is its own.
  auto a_steps = ListSteps(a_);
  ASSERT_TRUE(a_steps.ok());
  ASSERT_EQ(a_steps->size(), 1u);
  EXPECT_FALSE((*a_steps)[0].link);
  // The link survives retention in B (not B's to delete), and so does A's step.
  ASSERT_TRUE(ApplyRetention(b_, 1).ok());
  EXPECT_TRUE(fs::is_symlink(b_ + "/" + StepDirName(50)));
  EXPECT_TRUE(fs::exists(a10 + "/" + kCommittedFile));
}

TEST_F(LinkRetentionTest, ALinkInsideTheRunIsDeletedAsALink) {
  // step_15 links to the run's own newest step 40: deleting the old name
  // must not uncommit step 40.
  for (int64_t s : {20, 30, 40}) MakeCommittedStep(b_, s, 2);
  const std::string b40 = b_ + "/" + StepDirName(40);
  const auto before = Contents(b40);
  fs::create_symlink(StepDirName(40), b_ + "/" + StepDirName(15));
  auto steps = ListSteps(b_);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 4u);
  EXPECT_TRUE((*steps)[0].link);

  ASSERT_TRUE(ApplyRetention(b_, 1).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(b_ + "/" + StepDirName(15)))) << "the link itself is gone";
  EXPECT_EQ(Contents(b40), before) << "deleting the link went through it";
  auto latest = FindLatestGoodStep(b_, true);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, b40);
}

// A folder named after one step holding another's manifest (a copy or a link
// under a newer name) is not that step: Open refuses it naming both, and
// resume falls back to the newest real step.
TEST_F(LinkRetentionTest, AFolderHoldingAnotherStepsManifestIsRefused) {
  MakeCommittedStep(b_, 10, 1);
  MakeCommittedStep(b_, 20, 1);
  fs::create_symlink(StepDirName(10), b_ + "/" + StepDirName(30));
  auto r = CheckpointReader::Open(b_ + "/" + StepDirName(30), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("named step 30 but its manifest (COMMITTED) is of step 10"), std::string::npos)
      << r.status().ToString();
  // With a trailing slash too.
  EXPECT_FALSE(CheckpointReader::Open(b_ + "/" + StepDirName(30) + "/", false).ok());
  auto latest = FindLatestGoodStep(b_, true);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, b_ + "/" + StepDirName(20));
  // A copy under another name is refused the same way; any other name opens.
  fs::copy(b_ + "/" + StepDirName(20), b_ + "/" + StepDirName(40));
  EXPECT_FALSE(CheckpointReader::Open(b_ + "/" + StepDirName(40), false).ok());
  fs::copy(b_ + "/" + StepDirName(20), Path("best"));
  EXPECT_TRUE(CheckpointReader::Open(Path("best"), true).ok());
}

}  // namespace
}  // namespace shard
