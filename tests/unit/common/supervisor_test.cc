// The local supervisor with real children (/bin/sh scripts): every rank's
// end reported (exit code or signal), a failure stopping the siblings
// (SIGTERM, then SIGKILL for one that ignores it), signals passed on to each
// rank's process group, and adopted processes watched by pid. Scripts
// announce readiness in files; the test waits for those, never for a time.
#include "tests/unit/common/shell_fixture.h"
#include "shard/common/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

namespace shard {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class SupervisorTest : public testing_util::ShellFixture {
 protected:
  SupervisorTest() : ShellFixture("supervisor_test") {}
  // A shell line that waits until `file` exists (the event a script needs).
  std::string AwaitFile(const std::string& file) const {
    return "while [ ! -e " + Path(file) + " ]; do sleep 0.01; done; ";
  }
  // Waits (bounded) until every file exists.
  static bool FilesAppear(const std::vector<std::string>& files) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (const auto& f : files) all = all && fs::exists(f);
      if (all) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  static std::map<int, ExitStatus> ByRank(const SuperviseResult& r) {
    std::map<int, ExitStatus> m;
    for (const RankEnd& e : r.ends) m[e.rank] = e.status;
    return m;
  }
};

TEST_F(SupervisorTest, ReportsEachRanksExitCodeOrSignal) {
  SuperviseOptions o;
  o.fails = [](const ExitStatus&) { return false; };  // nobody stops anybody
  Supervisor s(o);
  ASSERT_TRUE(s.Spawn(0, Sh("exit 0")).ok());
  ASSERT_TRUE(s.Spawn(1, Sh("exit 3")).ok());
  ASSERT_TRUE(s.Spawn(2, Sh("kill -SEGV $$")).ok());
  const SuperviseResult r = s.Wait();
  ASSERT_EQ(r.ends.size(), 3u);
  auto by = ByRank(r);
  EXPECT_TRUE(by[0].ok());
  EXPECT_EQ(by[1].code, 3);
  EXPECT_EQ(by[1].signal, 0);
  EXPECT_EQ(by[2].signal, SIGSEGV);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_EQ(r.signal, 0);
}

TEST_F(SupervisorTest, AFailureStopsTheSiblingsWithSigterm) {
  SuperviseOptions o;
  std::vector<std::pair<int, bool>> seen;
  o.on_end = [&](const RankEnd& e, bool dooms) { seen.push_back({e.rank, dooms}); };
  Supervisor s(o);
  ASSERT_TRUE(s.Spawn(0, Sh("touch " + Path("up0") + "; exec sleep 1000")).ok());
  ASSERT_TRUE(s.Spawn(1, Sh("touch " + Path("up1") + "; exec sleep 1000")).ok());
  ASSERT_TRUE(s.Spawn(2, Sh(AwaitFile("up0") + AwaitFile("up1") + "exit 4")).ok());
  const SuperviseResult r = s.Wait();
  EXPECT_EQ(r.failed_rank, 2);
  auto by = ByRank(r);
  EXPECT_EQ(by[2].code, 4);
  EXPECT_EQ(by[0].signal, SIGTERM);
  EXPECT_EQ(by[1].signal, SIGTERM);
  // Only the failure that stopped them "dooms"; the stopped ranks do not.
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], std::make_pair(2, true));
  EXPECT_FALSE(seen[1].second);
  EXPECT_FALSE(seen[2].second);
}

TEST_F(SupervisorTest, ARankIgnoringSigtermIsKilledAfterTheGrace) {
  SuperviseOptions o;
  o.stop_grace_s = 0.2;
  Supervisor s(o);
  // The ignored disposition survives exec, so sleep ignores SIGTERM too.
  ASSERT_TRUE(s.Spawn(0, Sh("trap '' TERM; touch " + Path("deaf") + "; exec sleep 1000")).ok());
  ASSERT_TRUE(s.Spawn(1, Sh(AwaitFile("deaf") + "exit 1")).ok());
  const SuperviseResult r = s.Wait();
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(ByRank(r)[0].signal, SIGKILL);
}

TEST_F(SupervisorTest, WithoutAGraceSiblingsGetOnlySigterm) {
  SuperviseOptions o;
  o.stop_grace_s = -1;  // the worker's --nproc-per-node: SIGTERM, no SIGKILL
  o.fails = [](const ExitStatus& e) { return !e.ok() && e.code != 5; };
  Supervisor s(o);
  // Rank 0 exits by itself once it saw SIGTERM (and was not killed).
  ASSERT_TRUE(s.Spawn(0, Sh("trap 'exit 6' TERM; touch " + Path("up") + "; while :; do sleep 0.05; done")).ok());
  // Preempted (5): not a failure. It exits 5 on SIGTERM too, since rank 2's
  // exit may be seen first and stop it.
  // Rank 2 fails only once ranks 0 and 1 both set their traps: a SIGTERM that
  // reached rank 1's shell before its trap killed it by the signal (a flake
  // seen under load).
  ASSERT_TRUE(s.Spawn(1, Sh("trap 'exit 5' TERM; touch " + Path("up1") + "; " + AwaitFile("up") + "exit 5")).ok());
  ASSERT_TRUE(s.Spawn(2, Sh(AwaitFile("up") + AwaitFile("up1") + "exit 2")).ok());
  const SuperviseResult r = s.Wait();
  EXPECT_EQ(r.failed_rank, 2);
  auto by = ByRank(r);
  EXPECT_EQ(by[1].code, 5);
  EXPECT_EQ(by[0].code, 6);
  EXPECT_EQ(by[0].signal, 0);
}

// Rank scripts that exit with `code` when `sig` reaches them, once they wrote `ready`.
std::string ExitOn(const std::string& sig, int code, const std::string& ready) {
  return "trap 'exit " + std::to_string(code) + "' " + sig + "; touch " + ready + "; while :; do sleep 0.05; done";
}

TEST_F(SupervisorTest, ACaughtSignalIsPassedOnToEveryRanksGroup) {
  SuperviseOptions o;
  o.forward = {{SIGUSR2, SIGUSR1}};  // caught as USR2, passed on as USR1
  o.fails = [](const ExitStatus&) { return false; };
  std::vector<int> caught;
  o.on_signal = [&](int sig) { caught.push_back(sig); };
  Supervisor s(o);
  ASSERT_TRUE(s.Spawn(0, Sh(ExitOn("USR1", 7, Path("r0")))).ok());
  ASSERT_TRUE(s.Spawn(1, Sh(ExitOn("USR1", 8, Path("r1")))).ok());
  std::thread sender([&] {
    if (FilesAppear({Path("r0"), Path("r1")})) ::kill(::getpid(), SIGUSR2);
  });
  const SuperviseResult r = s.Wait();
  sender.join();
  EXPECT_EQ(r.signal, SIGUSR2);
  EXPECT_EQ(caught, std::vector<int>{SIGUSR2});
  auto by = ByRank(r);
  EXPECT_EQ(by[0].code, 7);
  EXPECT_EQ(by[1].code, 8);
}

TEST_F(SupervisorTest, ASignalCaughtBeforeWaitIsPassedOnAndCanStopTheRanks) {
  SuperviseOptions o;
  o.forward = {{SIGUSR2, SIGUSR2}};
  o.stop_on_signal = true;
  o.stop_grace_s = 5;
  Supervisor s(o);
  // Both ignore USR2, so only the stop (SIGTERM) ends them.
  ASSERT_TRUE(s.Spawn(0, Sh("trap '' USR2; touch " + Path("r0") + "; exec sleep 1000")).ok());
  ASSERT_TRUE(s.Spawn(1, Sh("trap '' USR2; touch " + Path("r1") + "; exec sleep 1000")).ok());
  ASSERT_TRUE(FilesAppear({Path("r0"), Path("r1")}));
  ::kill(::getpid(), SIGUSR2);  // before Wait: remembered in the pipe
  const SuperviseResult r = s.Wait();
  EXPECT_EQ(r.signal, SIGUSR2);
  EXPECT_EQ(r.failed_rank, -1);
  auto by = ByRank(r);
  EXPECT_EQ(by[0].signal, SIGTERM);
  EXPECT_EQ(by[1].signal, SIGTERM);
}

TEST_F(SupervisorTest, TheHandlersAreRestoredAfterwards) {
  struct sigaction before = {}, after = {};
  ::sigaction(SIGUSR2, nullptr, &before);
  {
    SuperviseOptions o;
    o.forward = {{SIGUSR2, SIGUSR2}};
    Supervisor s(o);
    struct sigaction during = {};
    ::sigaction(SIGUSR2, nullptr, &during);
    EXPECT_NE(during.sa_handler, before.sa_handler);
  }
  ::sigaction(SIGUSR2, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST_F(SupervisorTest, ASpawnErrorNamesTheProgramAndStopKillsTheStarted) {
  Supervisor s(SuperviseOptions{});
  ASSERT_TRUE(s.Spawn(0, Sh("touch " + Path("up") + "; exec sleep 1000")).ok());
  SpawnOptions bad;
  bad.argv = {Path("no-such-worker")};
  auto st = s.Spawn(1, bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("no-such-worker"), std::string::npos) << st.status().ToString();
  s.Stop();
  EXPECT_TRUE(s.Wait().ends.empty());  // nothing left to wait for
}

TEST_F(SupervisorTest, AnAdoptedProcessIsSeenEndingByPid) {
  auto other = Process::Spawn(Sh("exec sleep 1000"));
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  RankGroup g;
  g.Adopt(3, other->pid());
  EXPECT_TRUE(g.Poll().empty());
  EXPECT_EQ(g.running(), 1);
  g.Signal(SIGTERM);  // reaches the adopted group
  const auto e = other->Wait(10);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGTERM);
  const auto ends = g.Poll();
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].rank, 3);
  EXPECT_TRUE(ends[0].adopted);
  EXPECT_EQ(ends[0].status.code, -1);
  EXPECT_EQ(g.running(), 0);
}

}  // namespace
}  // namespace shard
