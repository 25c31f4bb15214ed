// The memory tier's folder rules (shard/common/owned_dir.h): created 0700,
// links, other users' folders and group/other-writable folders refused with a
// line naming them, deletions only inside the opened folder.
#include "shard/common/owned_dir.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "shard/common/file_util.h"

namespace shard {
namespace {
namespace fs = std::filesystem;

class OwnedDirTest : public testing::Test {
 protected:
  void SetUp() override {
    base_ = testing::TempDir() + "/owned_dir_test_" + testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(base_);
    fs::create_directories(base_);
    ::chmod(base_.c_str(), 0755);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }
  static unsigned Mode(const std::string& p) {
    struct stat st;
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }
  std::string base_;
};

TEST_F(OwnedDirTest, CreatesEachFolder0700AndFilesInsideAre0600) {
  const std::string root = base_ + "/a/shardd-x";
  auto d = OwnedDir::Open(root, "job-1/host-a", /*create=*/true);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->path(), root + "/job-1/host-a");
  EXPECT_GE(d->fd(), 0);
  EXPECT_EQ(Mode(base_ + "/a"), 0700u);
  EXPECT_EQ(Mode(root), 0700u);
  EXPECT_EQ(Mode(root + "/job-1"), 0700u);
  EXPECT_EQ(Mode(root + "/job-1/host-a"), 0700u);
  // A file written in a private folder is private; in an ordinary one, not.
  ASSERT_TRUE(WriteFileAtomic(d->path() + "/COMMITTED", std::string("{}")).ok());
  EXPECT_EQ(Mode(d->path() + "/COMMITTED"), 0600u);
  ASSERT_TRUE(WriteFileAtomic(base_ + "/plain.txt", std::string("x")).ok());
  EXPECT_EQ(Mode(base_ + "/plain.txt"), 0644u);
  // Opened again without create: the same folder.
  auto again = OwnedDir::OpenUnderParent(root + "/job-1", /*create=*/false);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->path(), root + "/job-1");
  EXPECT_EQ(OwnedDir::Open(root, "job-2", false).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(root + "/job-2"));
}

TEST_F(OwnedDirTest, RefusesALinkedRootOrJobFolderNamingIt) {
  fs::create_directories(base_ + "/elsewhere/job-1");
  ::chmod((base_ + "/elsewhere").c_str(), 0700);
  ::chmod((base_ + "/elsewhere/job-1").c_str(), 0700);
  fs::create_symlink(base_ + "/elsewhere", base_ + "/root-link");
  auto r = OwnedDir::Open(base_ + "/root-link", "job-1", true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find(base_ + "/root-link is a symbolic link"), std::string::npos)
      << r.status().message();

  const std::string root = base_ + "/root";
  ASSERT_TRUE(OwnedDir::Open(root, "", true).ok());
  fs::create_directory_symlink(base_ + "/elsewhere/job-1", root + "/job-1");
  auto j = OwnedDir::Open(root, "job-1", true);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find(root + "/job-1 is a symbolic link"), std::string::npos) << j.status().message();
}

TEST_F(OwnedDirTest, RefusesGroupOrOtherWritableFolders) {
  const std::string root = base_ + "/root";
  fs::create_directories(root + "/job-1");
  ::chmod(root.c_str(), 0777);
  auto r = OwnedDir::Open(root, "job-1", true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find(root + " is writable by group or others (mode 0777)"), std::string::npos)
      << r.status().message();
  ::chmod(root.c_str(), 0700);
  ::chmod((root + "/job-1").c_str(), 0770);
  auto j = OwnedDir::Open(root, "job-1", true);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find(root + "/job-1 is writable by group or others"), std::string::npos)
      << j.status().message();
  // A root in a folder anyone may write, without the sticky bit: refused
  // (another user could rename it away); with it (/dev/shm, /tmp): fine.
  const std::string open_parent = base_ + "/open";
  fs::create_directories(open_parent);
  ::chmod(open_parent.c_str(), 0777);
  if (::geteuid() == 0) ::chown(open_parent.c_str(), 65534, 65534);
  if (::geteuid() == 0) {
    auto p = OwnedDir::Open(open_parent + "/root", "", true);
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("is writable by others and not sticky"), std::string::npos)
        << p.status().message();
    ::chmod(open_parent.c_str(), 01777);
    EXPECT_TRUE(OwnedDir::Open(open_parent + "/root", "", true).ok());
  }
}

TEST_F(OwnedDirTest, RefusesAnotherUsersFolder) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a folder to nobody";
  const std::string root = base_ + "/root";
  fs::create_directories(root);
  ::chmod(root.c_str(), 0700);
  ASSERT_EQ(::chown(root.c_str(), 65534, 65534), 0);
  auto r = OwnedDir::Open(root, "job-1", true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find(root + " belongs to uid 65534, not to this user (uid 0)"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(fs::exists(root + "/job-1")) << "nothing is created in a refused folder";
  // The job folder of another user inside one's own root: refused too.
  ASSERT_EQ(::chown(root.c_str(), 0, 0), 0);
  fs::create_directories(root + "/job-1");
  ::chmod((root + "/job-1").c_str(), 0700);
  ASSERT_EQ(::chown((root + "/job-1").c_str(), 65534, 65534), 0);
  auto j = OwnedDir::Open(root, "job-1", true);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find(root + "/job-1 belongs to uid 65534"), std::string::npos) << j.status().message();
}

TEST_F(OwnedDirTest, AFileIsNotAFolder) {
  { std::ofstream(base_ + "/file") << "x"; }
  auto r = OwnedDir::Open(base_ + "/file", "job", true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find(base_ + "/file is not a directory"), std::string::npos) << r.status().message();
  EXPECT_FALSE(OwnedDir::Open("/dev/null", "job", true).ok());
  EXPECT_FALSE(OwnedDir::Open("relative/root", "", true).ok());
  EXPECT_FALSE(OwnedDir::Open(base_ + "/root", "../x", true).ok());
}

TEST_F(OwnedDirTest, RemoveDeletesInsideTheOpenedFolderNeverThroughALink) {
  const std::string root = base_ + "/root";
  auto d = OwnedDir::Open(root, "job-1", true);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  fs::create_directories(base_ + "/victim/sub");
  { std::ofstream(base_ + "/victim/sub/keep") << "x"; }
  fs::create_directories(d->path() + "/step_00000010/inner");
  { std::ofstream(d->path() + "/step_00000010/inner/shard") << "x"; }
  fs::create_directory_symlink(base_ + "/victim", d->path() + "/step_00000010/out");
  fs::create_directory_symlink(base_ + "/victim", d->path() + "/step_00000020");
  ASSERT_TRUE(d->Remove("step_00000010").ok());
  ASSERT_TRUE(d->Remove("step_00000020").ok());
  ASSERT_TRUE(d->Remove("step_00000030").ok());  // missing: fine
  EXPECT_FALSE(fs::exists(d->path() + "/step_00000010"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(d->path() + "/step_00000020")));
  EXPECT_TRUE(fs::exists(base_ + "/victim/sub/keep")) << "a link was followed";
  EXPECT_FALSE(d->Remove("../victim").ok());
  // The opened fd stays on the checked folder even when its path is swapped.
  fs::rename(d->path(), root + "/job-moved");
  fs::create_directory_symlink(base_ + "/victim", d->path());
  ASSERT_TRUE(d->Remove("sub").ok());
  EXPECT_TRUE(fs::exists(base_ + "/victim/sub/keep")) << "deleted outside the opened folder";
}

// Submission's check of memory.dir: nothing is created, and a path that is
// not (and cannot become) a folder the user owns and writes is refused with
// one line naming it.
TEST_F(OwnedDirTest, CheckOwnableDirRefusesWhatOpenWouldRefuseAndCreatesNothing) {
  EXPECT_TRUE(CheckOwnableDir(base_ + "/not/made/yet").ok());
  EXPECT_FALSE(fs::exists(base_ + "/not"));
  ASSERT_TRUE(OwnedDir::Open(base_ + "/mine", "", true).ok());
  EXPECT_TRUE(CheckOwnableDir(base_ + "/mine").ok());
  auto null = CheckOwnableDir("/dev/null");
  EXPECT_EQ(null.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(null.message(), "/dev/null is not a directory");
  { std::ofstream(base_ + "/file") << "x"; }
  EXPECT_EQ(CheckOwnableDir(base_ + "/file/below").message(),
            base_ + "/file/below cannot be created: " + base_ + "/file is not a directory");
  fs::create_directory_symlink(base_ + "/mine", base_ + "/link");
  EXPECT_NE(CheckOwnableDir(base_ + "/link").message().find("is a symbolic link"), std::string::npos);
  fs::create_directories(base_ + "/open");
  ::chmod((base_ + "/open").c_str(), 0777);
  EXPECT_NE(CheckOwnableDir(base_ + "/open").message().find("writable by group or others"), std::string::npos);
  EXPECT_FALSE(CheckOwnableDir("relative").ok());
  if (::geteuid() == 0) {
    ::chmod((base_ + "/open").c_str(), 0700);
    ASSERT_EQ(::chown((base_ + "/open").c_str(), 65534, 65534), 0);
    EXPECT_NE(CheckOwnableDir(base_ + "/open").message().find("belongs to uid 65534"), std::string::npos);
  }
}

}  // namespace
}  // namespace shard
