// One coordinator per state dir and per port (issue 28 item 1): the state
// dir's lock (refusal naming the holder's pid and address, released on
// destruction and by the kernel when the holder dies, never inherited by the
// processes a coordinator launches), the listeners that never share a port
// (gRPC and HTTP, each refused with "port taken"), and whole coordinators:
// a second one on the same state dir is refused, a read-only view is not.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coordinator/daemon/coordinator.h"
#include "coordinator/server/http_server.h"
#include "coordinator/server/listen_check.h"
#include "coordinator/state/state_dir_lock.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using StateDirLockTest = ScratchTest;

// A child process that takes the lock, records `address`, reports through a
// pipe and then waits to be killed. Returns its pid.
pid_t ChildHoldingLock(const std::string& dir, const std::string& address) {
  int p[2];
  EXPECT_EQ(::pipe(p), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    auto lock = StateDirLock::Acquire(dir);
    char ok = lock.ok() && (*lock)->Record(address).ok() ? 1 : 0;
    if (::write(p[1], &ok, 1) != 1) ::_exit(3);
    ::pause();
    ::_exit(0);
  }
  ::close(p[1]);
  char ok = 0;
  EXPECT_EQ(::read(p[0], &ok, 1), 1);
  EXPECT_EQ(ok, 1) << "the child could not take the lock";
  ::close(p[0]);
  return pid;
}

void KillAndReap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

TEST_F(StateDirLockTest, SecondAcquirerIsRefusedNamingPidAndAddress) {
  const pid_t holder = ChildHoldingLock(dir_, "127.0.0.1:7171");
  auto second = StateDirLock::Acquire(dir_);
  KillAndReap(holder);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), shard::StatusCode::kUnavailable);
  const std::string& m = second.status().message();
  EXPECT_NE(m.find("pid " + std::to_string(holder)), std::string::npos) << m;
  EXPECT_NE(m.find("127.0.0.1:7171"), std::string::npos) << m;
  EXPECT_NE(m.find(dir_), std::string::npos) << m;
}

TEST_F(StateDirLockTest, AHolderThatDiesReleasesItAndItsFileBlocksNobody) {
  const pid_t holder = ChildHoldingLock(dir_, "127.0.0.1:7171");
  KillAndReap(holder);  // SIGKILL: no destructor ran, the file stays behind
  ASSERT_TRUE(fs::exists(fs::path(dir_) / StateDirLock::kFileName));
  auto lock = StateDirLock::Acquire(dir_);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
}

TEST_F(StateDirLockTest, ReleasedOnDestructionAndHeldAgainstThisProcessToo) {
  {
    auto first = StateDirLock::Acquire(dir_);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    auto again = StateDirLock::Acquire(dir_);  // a second open in this process is a second holder
    ASSERT_FALSE(again.ok());
    EXPECT_NE(again.status().message().find("pid " + std::to_string(::getpid())), std::string::npos)
        << again.status().message();
    EXPECT_NE(again.status().message().find("address not yet known"), std::string::npos)
        << again.status().message();
  }
  auto later = StateDirLock::Acquire(dir_);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
}

// Workers outlive the coordinator that launched them: they must not keep its
// state dir locked.
TEST_F(StateDirLockTest, ProcessesLaunchedByTheHolderDoNotInheritIt) {
  pid_t child = 0;
  {
    auto lock = StateDirLock::Acquire(dir_);
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
    int exec_done[2];  // close-on-exec: EOF once the child has exec'd (until then it shares every descriptor)
    ASSERT_EQ(::pipe2(exec_done, O_CLOEXEC), 0);
    child = ::fork();
    if (child == 0) {
      ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(exec_done[1]);
    char byte;
    EXPECT_EQ(::read(exec_done[0], &byte, 1), 0);
    ::close(exec_done[0]);
  }
  auto lock = StateDirLock::Acquire(dir_);
  KillAndReap(child);
  ASSERT_TRUE(lock.ok()) << "the launched process kept the lock: " << lock.status().ToString();
}

// A socket listening on a free loopback port with SO_REUSEPORT set, as
// gRPC's and cpp-httplib's defaults set it. Returns the fd; *port gets the port.
int ReusePortListener(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof(yes));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

TEST(ListenCheckTest, APortSomeoneListensOnIsTaken) {
  int port = 0;
  const int fd = ReusePortListener(&port);
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const shard::Status st = CheckPortFree(addr, " for HTTP", "--http-listen");
  ::close(fd);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), shard::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("cannot listen on " + addr + " for HTTP: port taken"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("--http-listen"), std::string::npos) << st.message();
  EXPECT_TRUE(CheckPortFree(addr, "", "--listen").ok()) << "closed, the port is free again";
  EXPECT_TRUE(CheckPortFree("127.0.0.1:0", "", "--listen").ok());
}

TEST(ListenCheckTest, PortsOutsideTheRangeAreUsageErrors) {
  std::string host;
  int port = -1;
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:", "127.0.0.1", "127.0.0.1:7x"}) {
    const shard::Status st = ParseHostPort(bad, "--listen", &host, &port);
    EXPECT_EQ(st.code(), shard::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("--listen"), std::string::npos) << st.message();
  }
  ASSERT_TRUE(ParseHostPort("[::1]:65535", "--listen", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 65535);
}

class OneDaemonTest : public JobManagerTest {};

TEST_F(OneDaemonTest, TwoHttpServersNeverShareAPort) {
  HttpServerOptions o;
  o.listen = "127.0.0.1:0";
  auto first = HttpServer::Start(o, manager_.get());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  o.listen = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = HttpServer::Start(o, manager_.get());
  ASSERT_FALSE(second.ok()) << "a second HTTP server bound port " << (*first)->port() << " too";
  EXPECT_NE(second.status().message().find("for HTTP"), std::string::npos) << second.status().message();
}

TEST_F(OneDaemonTest, TwoGrpcServersNeverShareAPort) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  auto first = CoordinatorServer::Start(o, manager_.get(), "t");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  o.listen = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = CoordinatorServer::Start(o, manager_.get(), "t");
  ASSERT_FALSE(second.ok()) << "a second gRPC server bound port " << (*first)->port() << " too";
  EXPECT_NE(second.status().message().find("port taken"), std::string::npos) << second.status().message();
}

CoordinatorOptions Options(const std::string& state_dir) {
  CoordinatorOptions o;
  o.state_dir = state_dir;
  o.server.listen = "127.0.0.1:0";
  o.http_listen = "";
  o.gpus = "none";
  o.worker_bin = "/bin/false";
  return o;
}

TEST_F(StateDirLockTest, ASecondCoordinatorOnTheStateDirIsRefusedAReadOnlyViewIsNot) {
  const std::string state = dir_ + "/state";
  auto first = Coordinator::Start(Options(state));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = Coordinator::Start(Options(state));  // another port, same state dir
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("pid " + std::to_string(::getpid()) + " serving " + (*first)->address()),
            std::string::npos)
      << second.status().message();
  CoordinatorOptions ro = Options(state);
  ro.read_only = true;
  auto view = Coordinator::Start(ro);
  ASSERT_TRUE(view.ok()) << "a read-only view needs no lock: " << view.status().ToString();
  (*view)->Stop();
  (*first)->Stop();
  first->reset();
  auto third = Coordinator::Start(Options(state));
  ASSERT_TRUE(third.ok()) << "the lock outlived its coordinator: " << third.status().ToString();
}

}  // namespace
}  // namespace shardd::testing
