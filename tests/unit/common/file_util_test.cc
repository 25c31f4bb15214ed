#include "shard/common/file_util.h"

#include <gtest/gtest.h>

#include <filesystem>

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

}  // namespace
}  // namespace shard
