// The rendezvous stores: semantics shared by all three (typed tests), then what is
// particular to each (file escaping and multi-process Add, prefixing).
#include "shard/common/kv_stores.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

namespace shard {
namespace {

using std::chrono::milliseconds;
namespace fs = std::filesystem;

std::string TempDir(const std::string& what) {
  std::string tmpl = (fs::temp_directory_path() / ("shardd-kv-" + what + "-XXXXXX")).string();
  char* dir = ::mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

// ---- Semantics every store has --------------------------------------------

enum class Kind { kMemory, kFile, kPrefix };

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    switch (GetParam()) {
      case Kind::kMemory:
        store_ = std::make_shared<InMemoryKvStore>();
        break;
      case Kind::kFile:
        dir_ = TempDir("semantics");
        store_ = std::make_shared<FileKvStore>(dir_);
        break;
      case Kind::kPrefix:
        store_ = std::make_shared<PrefixKvStore>(std::make_shared<InMemoryKvStore>(), "job/a1/");
        break;
    }
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::shared_ptr<KvStore> store_;
  std::string dir_;
};

TEST_P(StoreTest, SetGetOverwriteCheck) {
  EXPECT_FALSE(*store_->Check("a"));
  ASSERT_TRUE(store_->Set("a", "1").ok());
  EXPECT_TRUE(*store_->Check("a"));
  EXPECT_EQ(*store_->Get("a", milliseconds(10)), "1");
  ASSERT_TRUE(store_->Set("a", std::string("two\0bytes", 9)).ok());
  EXPECT_EQ(*store_->Get("a", milliseconds(10)), std::string("two\0bytes", 9));
  ASSERT_TRUE(store_->Set("empty", "").ok());
  EXPECT_EQ(*store_->Get("empty", milliseconds(10)), "");
}

TEST_P(StoreTest, GetWaitsForALaterSet) {
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(store_->Set("late", "here").ok());
  });
  auto v = store_->Get("late", milliseconds(5000));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "here");
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  const auto start = std::chrono::steady_clock::now();
  auto v = store_->Get("never", milliseconds(100));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(v.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("'"), std::string::npos);
  EXPECT_NE(v.status().message().find("never"), std::string::npos) << v.status().ToString();
  EXPECT_GE(took, milliseconds(100));
  EXPECT_LT(took, milliseconds(2000));
}

TEST_P(StoreTest, WaitNamesOnlyTheMissingKeys) {
  ASSERT_TRUE(store_->Set("k0", "x").ok());
  ASSERT_TRUE(store_->Wait({"k0"}, milliseconds(10)).ok());
  Status st = store_->Wait({"k0", "k1", "k2"}, milliseconds(50));
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(st.message().find("k1"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("k2"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.message().find("k0'"), std::string::npos) << st.ToString();
}

TEST_P(StoreTest, AddCountsFromZeroAndRejectsNonIntegers) {
  EXPECT_EQ(*store_->Add("n", 5), 5);
  EXPECT_EQ(*store_->Add("n", -2), 3);
  EXPECT_EQ(*store_->Get("n", milliseconds(10)), "3");
  ASSERT_TRUE(store_->Set("s", "abc").ok());
  auto bad = store_->Add("s", 1);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("s'"), std::string::npos) << bad.status().ToString();
}

TEST_P(StoreTest, ConcurrentAddsFromThreadsAreAtomic) {
  constexpr int kThreads = 4, kAdds = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) ASSERT_TRUE(store_->Add("counter", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*store_->Add("counter", 0), kThreads * kAdds);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest,
                         ::testing::Values(Kind::kMemory, Kind::kFile, Kind::kPrefix),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           switch (info.param) {
                             case Kind::kMemory: return std::string("InMemory");
                             case Kind::kFile: return std::string("File");
                             default: return std::string("Prefix");
                           }
                         });

// ---- FileKvStore ------------------------------------------------------------

TEST(FileKvStoreTest, CreatesMissingDirectories) {
  const std::string root = TempDir("mkdir");
  const std::string dir = root + "/a/b/c";
  FileKvStore store(dir);
  ASSERT_TRUE(store.Set("x", "1").ok());
  EXPECT_TRUE(fs::is_directory(dir));
  fs::remove_all(root);
}

TEST(FileKvStoreTest, ReportsAnUncreatableDirectory) {
  FileKvStore store("/proc/shardd-cannot-create-this");
  Status st = store.Set("x", "1");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/proc/shardd-cannot-create-this"), std::string::npos) << st.ToString();
}

TEST(FileKvStoreTest, EscapesKeysIntoSafeDistinctFileNames) {
  const std::string dir = TempDir("escape");
  FileKvStore store(dir);
  const std::vector<std::string> keys = {"job/a0/gloo/0", "../../etc/passwd", ".hidden", "a b",
                                         "a%20b", "x.lock", std::string(400, 'k'),
                                         std::string(400, 'k') + "2", ""};
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_TRUE(store.Set(keys[i], std::to_string(i)).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(*store.Get(keys[i], milliseconds(10)), std::to_string(i)) << keys[i];
    const std::string name = FileKvStore::FileNameForKey(keys[i]);
    EXPECT_EQ(name.find('/'), std::string::npos) << name;
    EXPECT_NE(name[0], '.') << name;
    EXPECT_LE(name.size(), 200u) << name;
  }
  // Everything stayed inside the directory, one file per key.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().rfind("k_", 0), 0u) << e.path();
  }
  EXPECT_EQ(files, keys.size());
  fs::remove_all(dir);
}

TEST(FileKvStoreTest, ReadersNeverSeeAPartialValue) {
  const std::string dir = TempDir("atomic");
  FileKvStore store(dir);
  const std::string big_a(1 << 20, 'a'), big_b(1 << 20, 'b');
  ASSERT_TRUE(store.Set("v", big_a).ok());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) ASSERT_TRUE(store.Set("v", i % 2 ? big_a : big_b).ok());
  });
  for (int i = 0; i < 200; ++i) {
    auto v = store.Get("v", milliseconds(100));
    ASSERT_TRUE(v.ok());
    ASSERT_TRUE(*v == big_a || *v == big_b) << "partial value of size " << v->size();
  }
  stop = true;
  writer.join();
  fs::remove_all(dir);
}

// Two processes (and two threads in each) hammer one counter: no increment is lost.
TEST(FileKvStoreTest, ConcurrentAddsFromTwoProcessesAreAtomic) {
  const std::string dir = TempDir("fork");
  constexpr int kProcs = 2, kThreads = 2, kAdds = 150;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      FileKvStore store(dir);
      bool ok = true;
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&] {
          for (int i = 0; i < kAdds; ++i) ok = ok && store.Add("shared/counter", 1).ok();
        });
      }
      for (auto& t : threads) t.join();
      ::_exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  FileKvStore store(dir);
  EXPECT_EQ(*store.Add("shared/counter", 0), kProcs * kThreads * kAdds);
  fs::remove_all(dir);
}

// ---- PrefixKvStore ----------------------------------------------------------

TEST(PrefixKvStoreTest, NamespacesKeysInTheBaseStore) {
  auto base = std::make_shared<InMemoryKvStore>();
  PrefixKvStore a1(base, "job/a1/"), a2(base, "job/a2/");
  ASSERT_TRUE(a1.Set("id", "first").ok());
  EXPECT_EQ(*base->Get("job/a1/id", milliseconds(10)), "first");
  EXPECT_FALSE(*a2.Check("id"));  // a restarted attempt never sees the old value
  ASSERT_TRUE(a2.Set("id", "second").ok());
  EXPECT_EQ(*a1.Get("id", milliseconds(10)), "first");
  EXPECT_EQ(*a1.Add("n", 2), 2);
  EXPECT_EQ(*base->Add("job/a1/n", 0), 2);
  // Errors name the full key, so a timeout says which attempt it was waiting in.
  Status st = a2.Wait({"missing"}, milliseconds(20));
  EXPECT_NE(st.message().find("job/a2/missing"), std::string::npos) << st.ToString();
  // Prefixes nest.
  PrefixKvStore nested(std::make_shared<PrefixKvStore>(base, "job/"), "a3/");
  ASSERT_TRUE(nested.Set("k", "v").ok());
  EXPECT_TRUE(*base->Check("job/a3/k"));
}

}  // namespace
}  // namespace shard
