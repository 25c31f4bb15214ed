#include "shard/common/file_util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>

namespace shard {
namespace {

TEST(FileUtilTest, AtomicWriteReadAndMap) {
  std::string dir = testing::TempDir() + "/file_util_test";
  std::filesystem::create_directories(dir);
  std::string path = dir + "/a.bin";
  ASSERT_TRUE(WriteFileAtomic(path, std::string("hello")).ok());
  ASSERT_TRUE(WriteFileAtomic(path, std::string("world!")).ok());  // replaces
  auto text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "world!");
  auto m = MappedFile::Open(path);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->size(), 6u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), 6), "world!");
  // No temp files are left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(FileUtilTest, MissingPathsNameThePath) {
  auto r = ReadFileToString("/nonexistent/x.txt");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/x.txt"), std::string::npos);
  auto m = MappedFile::Open("/nonexistent/y.bin");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(WriteFileAtomic("/nonexistent/dir/z", std::string("x")).ok());
  EXPECT_FALSE(MappedFile::Open("/tmp").ok());  // a directory
}


// Issue 39 item 8: a FIFO at a path a reader opens used to hang it (no
// writer ever comes). Read on a thread: on a hang the test unblocks the
// reader by opening the FIFO's write end, and fails.
TEST(FileUtilTest, AFifoIsRefusedWithoutBlocking) {
  const std::string dir = testing::TempDir() + "/file_util_fifo";
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/ref.f64";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (int reader = 0; reader < 2; ++reader) {
    auto done = std::async(std::launch::async, [&]() -> Status {
      if (reader == 0) return ReadFileToString(fifo).status();
      return MappedFile::Open(fifo).status();
    });
    if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      ADD_FAILURE() << "reader " << reader << " blocked on a FIFO";
      const int w = ::open(fifo.c_str(), O_WRONLY);
      if (w >= 0) ::close(w);
    }
    const Status st = done.get();
    EXPECT_FALSE(st.ok()) << reader;
    EXPECT_NE(st.message().find(fifo + " is not a regular file (it is a FIFO)"), std::string::npos) << st.message();
  }
  std::filesystem::remove_all(dir);
}

TEST(FileUtilTest, DevicesAndDirectoriesAreRefusedNamingThePath) {
  auto zero = ReadFileToString("/dev/zero");
  ASSERT_FALSE(zero.ok()) << "read " << zero->size() << " bytes of /dev/zero";
  EXPECT_NE(zero.status().message().find("/dev/zero is not a regular file (it is a character device)"),
            std::string::npos)
      << zero.status().message();
  EXPECT_FALSE(MappedFile::Open("/dev/zero").ok());
  const std::string dir = testing::TempDir();
  auto d = ReadFileToString(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("a directory"), std::string::npos) << d.status().message();
}

TEST(FileUtilTest, NoFollowRefusesALinkAndExpectedSizeRefusesAnyOther) {
  const std::string dir = testing::TempDir() + "/file_util_nofollow";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomic(dir + "/real", std::string("12345")).ok());
  std::filesystem::create_symlink(dir + "/real", dir + "/link");
  EXPECT_TRUE(ReadFileToString(dir + "/link").ok()) << "links are followed unless asked not to";
  ReadFileOptions strict;
  strict.follow_links = false;
  auto linked = ReadFileToString(dir + "/link", strict);
  ASSERT_FALSE(linked.ok());
  EXPECT_EQ(linked.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(linked.status().message().find(dir + "/link is a symbolic link"), std::string::npos);
  strict.expected_size = 5;
  auto exact = ReadFileToString(dir + "/real", strict);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  EXPECT_EQ(*exact, "12345");
  strict.expected_size = 4;
  auto wrong = ReadFileToString(dir + "/real", strict);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(wrong.status().message().find("has 5 bytes, 4 expected"), std::string::npos) << wrong.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shard
