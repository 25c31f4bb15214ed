// The per-host memory tier's worker side (worker/memory_partner.h), ranks as
// threads on two loopback "hosts" (127.0.0.1: ranks 0-1, 127.0.0.2: ranks
// 2-3) with one in-memory rendezvous store: partners pair across the hosts,
// a written shard lands at the partner, a wiped host assembles the committed
// step from the other host and every rank takes it; when a shard is on no
// host every rank takes the disk step instead.
#include "worker/memory_partner.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/partner_map.h"
#include "shard/common/checksum.h"
#include "shard/common/kv_stores.h"

namespace shardd {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::vector<std::string> kHosts = {"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"};

class MemoryPartnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/memory_partner_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl + "/job-0123";
  }
  void TearDown() override { fs::remove_all(fs::path(root_).parent_path()); }
  std::string HostDir(int r) const { return root_ + "/" + shard::MemoryHostFolder(kHosts[r]); }

  // Four ranks' partners on one fresh store (an attempt), started together.
  std::vector<std::unique_ptr<MemoryPartner>> StartAll() {
    auto kv = std::make_shared<shard::InMemoryKvStore>();
    std::vector<std::unique_ptr<MemoryPartner>> out(4);
    std::vector<std::thread> ts;
    for (int r = 0; r < 4; ++r)
      ts.emplace_back([&, r] {
        MemoryPartnerOptions o;
        o.rank = r;
        o.world = 4;
        o.hostname = kHosts[r];
        o.root = root_;
        o.timeout = 5s;
        auto p = MemoryPartner::Start(kv, o);
        EXPECT_TRUE(p.ok()) << p.status().ToString();
        if (p.ok()) out[r] = std::move(*p);
      });
    for (auto& t : ts) t.join();
    return out;
  }
  // Every rank resumes at once; returns each rank's outcome.
  // `manifests`: newest first, as the coordinator hands them.
  std::vector<MemoryResume> ResumeAll(std::vector<std::unique_ptr<MemoryPartner>>& ps,
                                      const std::vector<std::string>& manifests) {
    std::vector<MemoryResume> out(4);
    std::vector<std::thread> ts;
    for (int r = 0; r < 4; ++r)
      ts.emplace_back([&, r] {
        auto got = ps[r]->Resume(manifests, 20);
        EXPECT_TRUE(got.ok()) << got.status().ToString();
        if (got.ok()) out[r] = *got;
      });
    for (auto& t : ts) t.join();
    return out;
  }
  // Host A's writers (ranks 0, 1) write and send memory step `step`; returns its manifest.
  std::string WriteStep30(std::vector<std::unique_ptr<MemoryPartner>>& ps, int64_t step = 30) {
    shard::Manifest m;
    m.job = "job";
    m.step = step;
    m.world = 4;
    m.strategy = "hybrid_shard";
    m.shard_count = 2;
    m.units = {{"embed", 10}};
    m.samples_seen = 240;
    m.global_batch = 8;
    const std::string step_dir = HostDir(0) + "/" + shard::StepDirName(step);
    fs::create_directories(step_dir);
    for (int r = 0; r < 2; ++r) {
      const std::string name = "rank_0000" + std::to_string(r) + "-of-00002.shard";
      const std::string bytes = "shard " + std::to_string(r) + " of step " + std::to_string(step);
      std::ofstream(step_dir + "/" + name, std::ios::binary) << bytes;
      m.files.push_back({name, r, bytes.size(), shard::Xxh64(bytes.data(), bytes.size())});
      EXPECT_EQ(ps[r]->AfterMemorySave(step_dir, name, step), r + 2) << "rank " << r << "'s copy did not land";
    }
    return m.ToJson();
  }
  std::string root_;
};

TEST_F(MemoryPartnerTest, ShardsLandAtPartnersAndAWipedHostFetchesThemBack) {
  auto ps = StartAll();
  ASSERT_TRUE(ps[3]);
  EXPECT_EQ(ps[0]->partner_rank(), 2);
  EXPECT_EQ(ps[3]->partner_rank(), 1);
  const std::string manifest = WriteStep30(ps);
  for (const char* f : {"rank_00000-of-00002.shard", "rank_00001-of-00002.shard"})
    EXPECT_TRUE(fs::exists(HostDir(2) + "/step_00000030/" + f)) << f << " has no partner copy on host B";
  ps.clear();

  fs::remove_all(HostDir(2));  // host B replaced
  auto next = StartAll();      // the next attempt
  const auto got = ResumeAll(next, {manifest});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r].step_dir, HostDir(r) + "/step_00000030") << "rank " << r;
  EXPECT_TRUE(got[0].events.empty());
  EXPECT_NE(got[0].note.find("took rank_0000"), std::string::npos) << got[0].note;
  EXPECT_NE(got[0].note.find("on host 127.0.0.1"), std::string::npos) << got[0].note;
  EXPECT_TRUE(fs::exists(HostDir(2) + "/step_00000030/COMMITTED"));
}

TEST_F(MemoryPartnerTest, AShardOnNoHostSendsEveryRankToDisk) {
  auto ps = StartAll();
  ASSERT_TRUE(ps[3]);
  const std::string manifest = WriteStep30(ps);
  ps.clear();
  for (int r : {0, 2}) fs::remove(HostDir(r) + "/step_00000030/rank_00001-of-00002.shard");
  auto next = StartAll();
  const auto got = ResumeAll(next, {manifest});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r].step_dir, "") << "rank " << r << " took a step another rank lacks";
  ASSERT_EQ(got[0].events.size(), 1u);
  EXPECT_EQ(got[0].events[0].rfind("skipping step 30 (memory): rank ", 0), 0u) << got[0].events[0];
  EXPECT_NE(got[0].events[0].find("lacks rank_00001-of-00002.shard"), std::string::npos) << got[0].events[0];
  EXPECT_EQ(got[0].note, "") << "no 'resumed from disk' when nothing was resumed";
  // The attempt starts from disk step 20: the host's later folders go.
  EXPECT_FALSE(fs::exists(HostDir(0) + "/step_00000030"));
}

// Issue 39 item 6: the newest memory step damaged (one flipped byte in the
// only copy of a shard: its partner's host was wiped) falls back to the
// previous memory step, which every host can assemble — never to disk or to
// step 0 while an intact memory step exists — and the skip is an event.
TEST_F(MemoryPartnerTest, ADamagedNewestStepFallsBackToThePreviousMemoryStep) {
  auto ps = StartAll();
  ASSERT_TRUE(ps[3]);
  const std::string m30 = WriteStep30(ps, 30);
  const std::string m40 = WriteStep30(ps, 40);
  ps.clear();
  fs::remove_all(HostDir(2));  // host B replaced
  {
    const std::string path = HostDir(0) + "/step_00000040/rank_00001-of-00002.shard";
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(2);
    f.read(&c, 1);
    c ^= 0x20;
    f.seekp(2);
    f.write(&c, 1);
  }
  auto next = StartAll();
  const auto got = ResumeAll(next, {m40, m30});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r].step_dir, HostDir(r) + "/step_00000030") << "rank " << r;
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(got[r].events.size(), 1u) << "rank " << r;
    EXPECT_EQ(got[r].events[0].rfind("skipping step 40 (memory): rank ", 0), 0u) << got[r].events[0];
    EXPECT_NE(got[r].events[0].find("lacks rank_00001-of-00002.shard (this host's copy fails its checksum"),
              std::string::npos)
        << got[r].events[0];
  }
  EXPECT_FALSE(fs::exists(HostDir(0) + "/step_00000040")) << "the skipped newer step is not resumable any more";
}

// Issue 39 item 3: a partner whose server never answers (here a socket that
// listens but never accepts) costs the copy, within the copy's own deadline
// (copy_timeout, far below the rendezvous timeout), never a hung checkpoint
// thread: AfterMemorySave reports no partner copy, and the coordinator then
// records memory_step_not_committed.
TEST_F(MemoryPartnerTest, ACopyToAStalledPartnerEndsWithinItsOwnDeadline) {
  const int stalled = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
  ASSERT_EQ(::bind(stalled, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(stalled, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(stalled, reinterpret_cast<sockaddr*>(&a), &len);
  auto kv = std::make_shared<shard::InMemoryKvStore>();
  ASSERT_TRUE(kv->Set("memtier/addr/1", "127.0.0.2\n127.0.0.2:" + std::to_string(ntohs(a.sin_port)) +
                                            "#0123456789abcdef0123456789abcdef")
                  .ok());
  MemoryPartnerOptions o;
  o.rank = 0;
  o.world = 2;
  o.hostname = "127.0.0.1";
  o.root = root_;
  o.timeout = 600s;  // what a hung copy would have waited before
  o.copy_timeout = 1s;
  auto p = MemoryPartner::Start(kv, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ((*p)->partner_rank(), 1);
  const std::string step_dir = (*p)->host_dir() + "/" + shard::StepDirName(10);
  fs::create_directories(step_dir);
  std::ofstream(step_dir + "/rank_00000.shard") << "bytes";
  EXPECT_EQ((*p)->AfterMemorySave(step_dir, "rank_00000.shard", 10), -1);
  ::close(stalled);
}

}  // namespace
}  // namespace shardd
