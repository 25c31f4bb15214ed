// The memory tier's partner copy and fetch (shard/ckpt/shard_copy.h,
// memory_step_fetch.h), two "hosts" as two folders served on loopback: a
// writer's shard lands at its partner with the same bytes; a host whose
// folder was wiped (a replaced host) assembles the committed step from the
// other host and opens it; a file on no host leaves the step incomplete.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/copy_header.h"
#include "shard/ckpt/copy_peers.h"
#include "shard/ckpt/memory_step_fetch.h"
#include "shard/ckpt/shard_copy.h"
#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard::ckpt_testing {
namespace {

using std::chrono::milliseconds;

class ShardCopyTest : public ProtocolTest {
 protected:
  std::string HostA() const { return Path("shm/job/host-A"); }
  std::string HostB() const { return Path("shm/job/host-B"); }
  // A committed step of 2 shards in HostA; returns its manifest.
  Manifest StepOnA(int64_t step) {
    const std::string dir = MakeCommittedStep(HostA(), step, 2);
    auto text = ReadFileToString(dir + "/" + kCommittedFile);
    EXPECT_TRUE(text.ok());
    auto m = Manifest::FromJson(*text, dir);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return *m;
  }
};

TEST_F(ShardCopyTest, PutLandsAtThePartnerWithTheSameBytes) {
  const Manifest m = StepOnA(30);
  std::vector<std::string> put_steps;
  ShardCopyServer b(HostB(), [&](const std::string& d) { put_steps.push_back(d); });
  ASSERT_TRUE(b.Start("127.0.0.1", milliseconds(5000)).ok());
  const std::string src = HostA() + "/" + StepDirName(30) + "/" + m.files[0].name;
  Status st = PutShardFile(b.endpoint(), StepDirName(30), src, milliseconds(5000));
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::string dst = HostB() + "/" + StepDirName(30) + "/" + m.files[0].name;
  auto h = Xxh64File(dst);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, m.files[0].xxh64);
  EXPECT_EQ(b.files_received(), 1);
  ASSERT_EQ(put_steps.size(), 1u);
}

TEST_F(ShardCopyTest, NamesOutsideTheFolderAreRefused) {
  ShardCopyServer b(HostB());
  ASSERT_TRUE(b.Start("127.0.0.1", milliseconds(5000)).ok());
  WriteBytes(Path("x.bin"), "abc");
  // The refusal is the answer the caller reads (the server reads the whole
  // header first, so the connection is not reset under it).
  for (const std::string step : {"../../x", "step_00000001/.."}) {
    Status put = PutShardFile(b.endpoint(), step, Path("x.bin"), milliseconds(5000));
    EXPECT_NE(put.message().find("refused name " + step + "/x.bin"), std::string::npos) << put.ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(HostB()));
}

TEST_F(ShardCopyTest, ACallerWithoutTheKeyIsRefused) {
  const Manifest m = StepOnA(30);
  ShardCopyServer a(HostA()), b(HostB());
  ASSERT_TRUE(a.Start("127.0.0.1", milliseconds(5000)).ok());
  ASSERT_TRUE(b.Start("127.0.0.1", milliseconds(5000)).ok());
  ASSERT_NE(a.endpoint(), a.address() + "#");
  const std::string src = HostA() + "/" + StepDirName(30) + "/" + m.files[0].name;
  for (const std::string& wrong : {b.address(), b.address() + "#" + std::string(32, '0'), b.address() + "#"}) {
    Status put = PutShardFile(wrong, StepDirName(30), src, milliseconds(5000));
    EXPECT_FALSE(put.ok()) << wrong;
    EXPECT_NE(put.message().find("wrong partner-copy key"), std::string::npos) << put.ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(HostB()));
  EXPECT_EQ(b.files_received(), 0);
  // Nor can it read a shard: A's key does not open B, nor no key A.
  auto got = FetchShardFile(a.address(), StepDirName(30), m.files[0].name, Path("stolen"), m.files[0].size,
                            m.files[0].xxh64, milliseconds(5000));
  EXPECT_FALSE(got.ok());
  EXPECT_FALSE(std::filesystem::exists(Path("stolen")));
}

// A PUT announcing more bytes than the host has free is answered before a
// byte is taken (the server never tries to hold 512 GiB).
TEST_F(ShardCopyTest, APutLargerThanTheFreeSpaceIsRefusedUpFront) {
  ShardCopyServer b(HostB());
  ASSERT_TRUE(b.Start("127.0.0.1", milliseconds(5000)).ok());
  const std::string ep = b.endpoint(), key = ep.substr(ep.find('#') + 1);
  const int port = std::stoi(b.address().substr(b.address().rfind(':') + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  std::string req = "SHCP";
  auto put = [&](const void* p, size_t n) { req.append(static_cast<const char*>(p), n); };
  auto put_string = [&](const std::string& v) {
    const uint16_t n = static_cast<uint16_t>(v.size());
    put(&n, 2);
    req += v;
  };
  const uint32_t version = 2;
  const uint8_t op = 1;
  const uint64_t size = uint64_t{1} << 39, hash = 0;
  put(&version, 4);
  put_string(key);
  put(&op, 1);
  put_string(StepDirName(30));
  put_string("rank_00000-of-00002.shard");
  put(&size, 8);
  put(&hash, 8);
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  char reply[512] = {0};
  ssize_t got = 0, n = 0;
  while ((n = ::recv(fd, reply + got, sizeof(reply) - 1 - got, 0)) > 0) got += n;
  ::close(fd);
  ASSERT_GE(got, 3);
  EXPECT_EQ(reply[0], 2);  // error
  const std::string msg(reply + 3, static_cast<size_t>(got - 3));
  EXPECT_NE(msg.find("no room for step_00000030/rank_00000-of-00002.shard: 549755813888 bytes"), std::string::npos)
      << msg;
  EXPECT_EQ(b.files_received(), 0);
}

TEST_F(ShardCopyTest, AReplacedHostAssemblesTheStepFromTheOtherHost) {
  const Manifest m = StepOnA(30);
  ShardCopyServer a(HostA());
  ASSERT_TRUE(a.Start("127.0.0.1", milliseconds(5000)).ok());
  // Host B's folder is empty (wiped); a dead source comes first and is skipped.
  std::vector<MemoryStepSource> sources = {{7, "gone", "127.0.0.1:1"}, {0, "A", a.endpoint()}};
  auto got = AssembleMemoryStep(HostB(), m, sources, milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->complete) << got->missing;
  ASSERT_EQ(got->fetched.size(), 2u);
  EXPECT_NE(got->fetched[0].find("from rank 0 on host A"), std::string::npos) << got->fetched[0];
  auto opened = CheckpointReader::Open(got->step_dir, /*verify_checksums=*/true);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->manifest().step, 30);
}

TEST_F(ShardCopyTest, OwnCopiesStayAndOnlyTheMissingFileTravels) {
  const Manifest m = StepOnA(30);
  ShardCopyServer a(HostA());
  ASSERT_TRUE(a.Start("127.0.0.1", milliseconds(5000)).ok());
  // Host B holds shard 1 (its own copy); shard 0 is fetched.
  std::filesystem::create_directories(HostB() + "/" + StepDirName(30));
  std::filesystem::copy_file(HostA() + "/" + StepDirName(30) + "/" + m.files[1].name,
                             HostB() + "/" + StepDirName(30) + "/" + m.files[1].name);
  auto got = AssembleMemoryStep(HostB(), m, {{0, "A", a.endpoint()}}, milliseconds(5000));
  ASSERT_TRUE(got.ok() && got->complete);
  ASSERT_EQ(got->fetched.size(), 1u);
  EXPECT_EQ(got->fetched[0].substr(0, m.files[0].name.size()), m.files[0].name);
}

TEST_F(ShardCopyTest, AFileOnNoHostLeavesTheStepIncomplete) {
  const Manifest m = StepOnA(30);
  std::filesystem::remove(HostA() + "/" + StepDirName(30) + "/" + m.files[1].name);
  ShardCopyServer a(HostA());
  ASSERT_TRUE(a.Start("127.0.0.1", milliseconds(5000)).ok());
  auto got = AssembleMemoryStep(HostB(), m, {{0, "A", a.endpoint()}}, milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->complete);
  EXPECT_NE(got->missing.find(m.files[1].name), std::string::npos) << got->missing;
  EXPECT_FALSE(std::filesystem::exists(got->step_dir + "/" + kCommittedFile));
}

TEST_F(ShardCopyTest, HostRetentionKeepsTheNewestFoldersAndDropsLaterLeftovers) {
  // 90 and 95: an earlier run's (or attempt's) steps past the one just written.
  for (int64_t s : {5, 10, 15, 20, 90, 95}) MakeCommittedStep(HostA(), s, 1);
  ASSERT_TRUE(KeepNewestMemorySteps(HostA(), 20, 2).ok());  // training: a newer folder may be a fresh copy
  ASSERT_EQ(ListSteps(HostA())->size(), 4u);
  ASSERT_TRUE(KeepNewestMemorySteps(HostA(), 20, 2, /*drop_newer=*/true).ok());  // an attempt's start
  auto steps = ListSteps(HostA());
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].step, 15);
  EXPECT_EQ((*steps)[1].step, 20);
}


// A raw TCP connection to `address` ("host:port") that sends nothing; from
// `source` when given (another loopback address). -1 on failure.
int IdleSocket(const std::string& address, const char* source = nullptr) {
  const size_t colon = address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (source) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) return -1;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd`: waits for EOF (or a reset) up to a
// generous bound; false when the socket was still open then.
bool ClosedByServer(int fd, int bound_s) {
  timeval tv{bound_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char b;
  const ssize_t n = ::recv(fd, &b, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// Issue 39 item 3: one idle socket (no key needed) used to hold the
// one-at-a-time server for its whole io deadline, and every partner copy
// behind it timed out.
TEST_F(ShardCopyTest, AKeyedCopyIsServedWhileTenIdleSocketsAreHeld) {
  const std::string src = Path("x.bin");
  ASSERT_TRUE(WriteFileAtomic(src, std::string(4096, 'x')).ok());
  ShardCopyServer b(HostB());
  ASSERT_TRUE(b.Start("127.0.0.1", milliseconds(5000)).ok());
  std::vector<int> idle;
  for (int i = 0; i < 10; ++i) idle.push_back(IdleSocket(b.address()));
  for (int fd : idle) ASSERT_GE(fd, 0);
  Status put = PutShardFile(b.endpoint(), StepDirName(30), src, milliseconds(5000));
  ASSERT_TRUE(put.ok()) << put.ToString();
  EXPECT_EQ(b.files_received(), 1);
  const uint64_t h = Xxh64(std::string(4096, 'x').data(), 4096);
  auto got = FetchShardFile(b.endpoint(), StepDirName(30), "x.bin", Path("back"), 4096, h, milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got);
  for (int fd : idle) ::close(fd);
}

// The header and key must arrive within seconds, whatever the io deadline.
TEST_F(ShardCopyTest, AnIdleConnectionIsClosedAfterTheHeaderDeadline) {
  ShardCopyServer b(HostB());
  ASSERT_TRUE(b.Start("127.0.0.1", milliseconds(120000)).ok());
  const int fd = IdleSocket(b.address());
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(ClosedByServer(fd, 60)) << "an idle connection was still open after 60 s (io deadline 120 s)";
  ::close(fd);
}

// A peer past its cap evicts its own oldest connection still sending its
// header; 127.0.0.2 is the same peer as 127.0.0.1 (all of 127/8 is one).
TEST_F(ShardCopyTest, APeersConnectionsPastItsCapEvictItsOldestIdleOne) {
  ShardCopyServer b(HostB());
  ShardCopyServerOptions o;
  o.io_timeout = milliseconds(120000);
  o.header_timeout = milliseconds(120000);  // nothing here ends by the clock
  o.max_per_peer = 2;
  ASSERT_TRUE(b.Start("127.0.0.1", o).ok());
  const auto wait_open = [&](int n) {
    for (int i = 0; i < 6000 && b.open_connections() != n; ++i) std::this_thread::sleep_for(milliseconds(10));
    return b.open_connections();
  };
  const int s1 = IdleSocket(b.address());
  ASSERT_EQ(wait_open(1), 1);
  const int s2 = IdleSocket(b.address());
  ASSERT_EQ(wait_open(2), 2);
  const int s3 = IdleSocket(b.address(), "127.0.0.2");
  ASSERT_GE(s3, 0);
  EXPECT_TRUE(ClosedByServer(s1, 60)) << "the oldest idle connection of the peer was not evicted";
  EXPECT_EQ(b.evicted(), 1);
  EXPECT_EQ(b.open_connections(), 2);
  pollfd p{s2, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "the second connection was closed too";
  // A keyed copy still gets in (it evicts s2) and is served.
  const std::string src = Path("y.bin");
  ASSERT_TRUE(WriteFileAtomic(src, "yy").ok());
  Status put = PutShardFile(b.endpoint(), StepDirName(31), src, milliseconds(5000));
  EXPECT_TRUE(put.ok()) << put.ToString();
  EXPECT_TRUE(ClosedByServer(s2, 60));
  for (int fd : {s1, s2, s3}) ::close(fd);
}

TEST(CopyPeersTest, LoopbackIsOnePeerAndKeyedConnectionsAreNeverEvicted) {
  const auto v4 = [](const char* ip) {
    sockaddr_storage ss{};
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    ::inet_pton(AF_INET, ip, &a->sin_addr);
    return CopyPeerOf(ss);
  };
  const auto v6 = [](const char* ip) {
    sockaddr_storage ss{};
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    ::inet_pton(AF_INET6, ip, &a->sin6_addr);
    return CopyPeerOf(ss);
  };
  EXPECT_EQ(v4("127.0.0.1"), "loopback");
  EXPECT_EQ(v4("127.9.8.7"), "loopback");
  EXPECT_EQ(v6("::1"), "loopback");
  EXPECT_EQ(v6("::ffff:127.0.1.1"), "loopback");
  EXPECT_EQ(v4("10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(v6("fd00::5"), "fd00::5");

  // Caps count connections still sending their header; keyed copies apart.
  CopyConnections c(/*max_total=*/3, /*max_per_peer=*/2, /*max_keyed=*/2);
  auto a1 = c.Admit("A", 11), a2 = c.Admit("A", 12);
  EXPECT_EQ(a2.evict_fd, -1);
  ASSERT_TRUE(c.MarkKeyed(a1.id));
  ASSERT_TRUE(c.MarkKeyed(a2.id));
  auto a3 = c.Admit("A", 13), a4 = c.Admit("A", 14);
  EXPECT_EQ(a4.evict_fd, -1) << "keyed copies do not count against the peer's cap";
  auto a5 = c.Admit("A", 15);  // A has 2 idle connections: its oldest goes
  EXPECT_EQ(a5.evict_fd, 13);
  EXPECT_FALSE(c.MarkKeyed(a3.id)) << "an evicted connection";
  auto b1 = c.Admit("B", 21);  // 3 idle in all
  auto d1 = c.Admit("D", 41);  // over max_total: the oldest idle of anyone (A's 14) goes
  EXPECT_EQ(d1.evict_fd, 14);
  EXPECT_EQ(b1.evict_fd, -1);
  EXPECT_FALSE(c.MarkKeyed(b1.id)) << "max_keyed copies in progress";
  c.Release(a1.id);
  EXPECT_TRUE(c.MarkKeyed(b1.id));
  c.Release(a3.id);  // evicted earlier: nothing to release twice
  EXPECT_EQ(c.evicted(), 2);
  EXPECT_EQ(c.open(), 4);  // a2, a5, b1, d1
}

TEST(CopyHeaderTest, EveryPrefixNeedsMoreAndTheWholeRoundTrips) {
  CopyHeader h;
  h.key = "0123456789abcdef0123456789abcdef";
  h.op = kCopyPut;
  h.step = "step_00000030";
  h.name = "rank_00000.shard";
  h.size = 1234;
  h.xxh64 = 0xfeedULL;
  const std::string bytes = EncodeCopyHeader(h);
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_EQ(ParseCopyHeader(std::string_view(bytes).substr(0, n)).state, CopyHeaderParse::kNeedMore) << n;
  const CopyHeaderParse p = ParseCopyHeader(bytes);
  ASSERT_EQ(p.state, CopyHeaderParse::kDone);
  EXPECT_EQ(p.used, bytes.size());
  EXPECT_EQ(p.header.key, h.key);
  EXPECT_EQ(p.header.name, h.name);
  EXPECT_EQ(p.header.size, 1234u);
  EXPECT_EQ(EncodeCopyHeader(p.header), bytes);
  EXPECT_FALSE(ParseCopyHeader("GET / HTTP/1.1\r\n").answer);
  CopyHeader long_key = h;
  long_key.key.assign(kMaxCopyKey + 1, 'k');
  const CopyHeaderParse refused = ParseCopyHeader(EncodeCopyHeader(long_key));
  EXPECT_EQ(refused.state, CopyHeaderParse::kBad);
  EXPECT_NE(refused.error.find("key is longer than"), std::string::npos) << refused.error;
  EXPECT_TRUE(ValidCopyStepName("step_00000030"));
  EXPECT_FALSE(ValidCopyStepName("step_0000003x"));
  EXPECT_FALSE(ValidCopyFileName("../x"));
  EXPECT_FALSE(ValidCopyFileName(".hidden"));
}

}  // namespace
}  // namespace shard::ckpt_testing
