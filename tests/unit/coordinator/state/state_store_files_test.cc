// The state store's database file and folder: a corrupt database is refused
// naming the file and the backup kept at the last good open (which restores
// every job), or saying there is none; an unwritable folder or a path that is
// not a folder is an error naming it; the folder and the database are the
// owner's only, and looser modes from an older version are restricted on open.
#include "coordinator/state/state_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/unit/coordinator/state/state_store_test_util.h"

namespace shardd::testing {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// Issue 18 item 10: garbage written into the middle of shardd.db used to open
// as an empty store (77 jobs gone, new ones numbered from 1). Now the open is
// refused with a message naming the file and the backup kept at the last good
// open, and that backup restores every job.
TEST_F(StateStoreTest, ACorruptDatabaseIsRefusedAndTheBackupRestoresIt) {
  const std::string db = Path("state/shardd.db");
  {
    auto s = Open();
    ASSERT_NE(s, nullptr);
    for (int i = 1; i <= 77; ++i) {
      JobRecord j = Job("tiny-" + std::to_string(i));
      j.spec = std::string(1500, static_cast<char>('a' + i % 26));  // many pages
      ASSERT_TRUE(s->PutJob(j).ok());
    }
  }
  { ASSERT_NE(Open(), nullptr) << "a sound database opens (and is backed up)"; }
  ASSERT_TRUE(fs::exists(db + ".bak"));
  const std::string good = ReadBytes(db);
  ASSERT_GT(good.size(), 16u * 4096) << "the jobs must span many pages";
  std::string bad = good;
  const size_t page = (good.size() / 4096 / 2) * 4096;  // a page in the middle
  for (size_t i = 0; i < 4096; ++i) bad[page + i] = static_cast<char>((i * 131 + 7) & 0xff);
  WriteBytes(db, bad);

  auto s = StateStore::Open(Path("state"));
  ASSERT_FALSE(s.ok()) << "a corrupt database was served";
  EXPECT_EQ(s.status().code(), shard::StatusCode::kFailedPrecondition) << s.status().ToString();
  const std::string msg = s.status().message();
  EXPECT_TRUE(Contains(msg, db + " is corrupt")) << msg;
  EXPECT_TRUE(Contains(msg, "cp " + db + ".bak " + db)) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  EXPECT_EQ(ReadBytes(db), bad) << "the refused file is left as it was";

  fs::copy_file(db + ".bak", db, fs::copy_options::overwrite_existing);
  auto restored = Open();
  ASSERT_NE(restored, nullptr);
  auto jobs = restored->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->size(), 77u);
  EXPECT_EQ(*restored->MaxJobNumber(), 77);
}

TEST_F(StateStoreTest, ACorruptDatabaseWithoutBackupSaysSo) {
  { ASSERT_NE(Open(), nullptr); }
  fs::remove(Path("state/shardd.db.bak"));
  WriteBytes(Path("state/shardd.db"), std::string(8192, 'x'));  // not a database at all
  auto s = StateStore::Open(Path("state"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), "no backup " + Path("state/shardd.db.bak"))) << s.status().ToString();
}

TEST_F(StateStoreTest, UnwritableStateDirIsAnErrorNamingIt) {
  WriteBytes(Path("file"), "x");
  auto s = StateStore::Open(Path("file/state"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), Path("file/state"))) << s.status().ToString();
}

// The database held every attempt's worker token, world-readable (issue 18 #7).
TEST_F(StateStoreTest, StateDirAndDatabaseAreOwnerOnly) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->PutJob(Job("tiny-1")).ok());
  EXPECT_EQ(ModeOf(Path("state")), 0700u);
  EXPECT_EQ(ModeOf(Path("state/shardd.db")), 0600u);
  EXPECT_EQ(ModeOf(Path("state/shardd.db-wal")), 0600u);
  EXPECT_EQ(ModeOf(Path("state/shardd.db-shm")), 0600u);
}

TEST_F(StateStoreTest, LooseModesFromAnOlderVersionAreRestrictedOnOpen) {
  { ASSERT_NE(Open(), nullptr); }
  ASSERT_EQ(::chmod(Path("state").c_str(), 0755), 0);
  ASSERT_EQ(::chmod(Path("state/shardd.db").c_str(), 0644), 0);
  auto s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(ModeOf(Path("state")), 0700u);
  EXPECT_EQ(ModeOf(Path("state/shardd.db")), 0600u);
}

TEST_F(StateStoreTest, APathThatIsNotADirectoryIsRefused) {
  WriteBytes(Path("plainfile"), "x");
  auto s = StateStore::Open(Path("plainfile"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), "is not a directory")) << s.status().ToString();
}

}  // namespace
}  // namespace shardd::testing
