// The memory tier's deletions go only through its checked folders
// (shard/ckpt/checkpoint_tier.h over shard/common/owned_dir.h): retention,
// the drop below a disk step and the removal at the job's end refuse a root
// or job folder that is another user's or a link, delete nothing through a
// link, and name the folder in their error.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "shard/ckpt/checkpoint_tier.h"
#include "shard/ckpt/memory_step_fetch.h"
#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard::ckpt_testing {
namespace {

class MemoryTierFoldersTest : public ProtocolTest {
 protected:
  std::string Root() const { return Path("shm"); }
  std::string Job() const { return Path("shm/job-0123"); }
  void MakeRoot() {
    fs::create_directories(Job());
    ::chmod(Root().c_str(), 0700);
    ::chmod(Job().c_str(), 0700);
  }
};

TEST_F(MemoryTierFoldersTest, AnotherUsersRootIsNeitherPrunedNorRemoved) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to hand a folder to nobody";
  MakeRoot();
  MakeCommittedStep(Job(), 5, 1);
  MakeCommittedStep(Job(), 10, 1);
  ASSERT_EQ(::chown(Root().c_str(), 65534, 65534), 0);
  for (const Status& st : {DropMemoryStepsBefore(Job(), 100, ""), ApplyMemoryRetention(Job(), 1, ""),
                           KeepNewestMemorySteps(Job(), 10, 1), RemoveMemoryTier(Job())}) {
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
    EXPECT_NE(st.message().find(Root() + " belongs to uid 65534"), std::string::npos) << st.message();
  }
  EXPECT_TRUE(fs::exists(Job() + "/" + StepDirName(5) + "/" + kCommittedFile)) << "deleted in a refused folder";
  EXPECT_TRUE(fs::exists(Job() + "/" + StepDirName(10)));
}

TEST_F(MemoryTierFoldersTest, ALinkedJobFolderIsRemovedAsALinkAndNothingBehindItIsPruned) {
  fs::create_directories(Root());
  ::chmod(Root().c_str(), 0700);
  const std::string victim = Path("victim");
  MakeCommittedStep(victim, 5, 1);
  fs::create_directory_symlink(victim, Job());
  const Status drop = DropMemoryStepsBefore(Job(), 100, "");
  EXPECT_NE(drop.message().find(Job() + " is a symbolic link"), std::string::npos) << drop.ToString();
  EXPECT_FALSE(ApplyMemoryRetention(Job(), 1, "").ok());
  EXPECT_TRUE(fs::exists(victim + "/" + StepDirName(5) + "/" + kCommittedFile));
  // The end of the job removes the link itself, never what it points at.
  ASSERT_TRUE(RemoveMemoryTier(Job()).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(Job())));
  EXPECT_TRUE(fs::exists(victim + "/" + StepDirName(5) + "/" + kCommittedFile));
}

TEST_F(MemoryTierFoldersTest, OwnFoldersArePrunedInsideAndAMissingOneIsFine) {
  MakeRoot();
  MakeCommittedStep(Job(), 5, 1);
  MakeCommittedStep(Job(), 10, 1);
  ASSERT_TRUE(DropMemoryStepsBefore(Job(), 10, "").ok());
  EXPECT_FALSE(fs::exists(Job() + "/" + StepDirName(5)));
  EXPECT_TRUE(fs::exists(Job() + "/" + StepDirName(10)));
  ASSERT_TRUE(RemoveMemoryTier(Job()).ok());
  EXPECT_FALSE(fs::exists(Job()));
  EXPECT_TRUE(fs::exists(Root())) << "the root stays: other jobs' folders live there";
  EXPECT_TRUE(DropMemoryStepsBefore(Job(), 10, "").ok());
  EXPECT_TRUE(RemoveMemoryTier(Job()).ok());
}

}  // namespace
}  // namespace shard::ckpt_testing
