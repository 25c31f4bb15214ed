// The process module with real children (/bin/sh): exit codes and signals,
// the environment built before fork, the log redirect, errors for programs
// that cannot run, group kills that reach grandchildren, SIGTERM escalating
// to SIGKILL after the grace, and children dying with their parent.
#include "tests/unit/common/shell_fixture.h"
#include "shard/common/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace shard {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Gone, or a zombie nobody reaped yet (a container's pid 1 may never reap).
bool ProcessGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = Read("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

bool WaitGone(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ProcessGone(pid)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return ProcessGone(pid);
}

// Waits until the file holds a line (the pid a script wrote).
pid_t ReadPid(const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string s = Read(path);
    if (s.find('\n') != std::string::npos) return static_cast<pid_t>(std::stol(s));
    std::this_thread::sleep_for(5ms);
  }
  return -1;
}

class ProcessTest : public testing_util::ShellFixture {
 protected:
  ProcessTest() : ShellFixture("process_test") {}
};

TEST_F(ProcessTest, ExitCodeAndBothStreamsInTheLog) {
  auto p = Process::Spawn(Sh("echo to-stdout; echo to-stderr >&2; exit 3"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto e = p->Wait(10);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, 3);
  EXPECT_EQ(e->signal, 0);
  EXPECT_FALSE(e->ok());
  EXPECT_EQ(e->Describe(), "exited with code 3");
  const std::string log = Read(Path("out.log"));
  EXPECT_NE(log.find("to-stdout"), std::string::npos);
  EXPECT_NE(log.find("to-stderr"), std::string::npos);
  // The log is appended to, never truncated.
  auto again = Process::Spawn(Sh("echo second"));
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->Wait(10).has_value());
  EXPECT_NE(Read(Path("out.log")).find("to-stdout"), std::string::npos);
  EXPECT_NE(Read(Path("out.log")).find("second"), std::string::npos);
}

TEST_F(ProcessTest, PollIsNonBlocking) {
  auto p = Process::Spawn(Sh("sleep 0.3"));
  ASSERT_TRUE(p.ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(p->Poll().has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 200ms);
  EXPECT_TRUE(p->running());
  auto e = p->Wait(10);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->ok());
  EXPECT_FALSE(p->running());
}

TEST_F(ProcessTest, EnvironmentIsSetUnsetAndDefaulted) {
  ::setenv("PROCESS_TEST_INHERITED", "kept", 1);
  ::setenv("PROCESS_TEST_SECRET", "leak", 1);
  ::setenv("PROCESS_TEST_REPLACED", "old", 1);
  ::setenv("PROCESS_TEST_DEFAULT_GIVEN", "user", 1);
  SpawnOptions o = Sh("env");
  o.env.unset = {"PROCESS_TEST_SECRET"};
  o.env.set = {{"PROCESS_TEST_REPLACED", "new"}, {"PROCESS_TEST_ADDED", "a=b"}};
  o.env.defaults = {{"PROCESS_TEST_DEFAULT_GIVEN", "default"}, {"PROCESS_TEST_DEFAULT_MISSING", "default"}};
  auto p = Process::Spawn(o);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->Wait(10).has_value());
  const std::string env = Read(Path("out.log"));
  EXPECT_NE(env.find("PROCESS_TEST_INHERITED=kept\n"), std::string::npos);
  EXPECT_EQ(env.find("PROCESS_TEST_SECRET"), std::string::npos);
  EXPECT_NE(env.find("PROCESS_TEST_REPLACED=new\n"), std::string::npos);
  EXPECT_EQ(env.find("PROCESS_TEST_REPLACED=old"), std::string::npos);
  EXPECT_NE(env.find("PROCESS_TEST_ADDED=a=b\n"), std::string::npos);
  EXPECT_NE(env.find("PROCESS_TEST_DEFAULT_GIVEN=user\n"), std::string::npos);
  EXPECT_NE(env.find("PROCESS_TEST_DEFAULT_MISSING=default\n"), std::string::npos);
  // Nothing changed in this process.
  EXPECT_EQ(::getenv("PROCESS_TEST_ADDED"), nullptr);
  EXPECT_STREQ(::getenv("PROCESS_TEST_SECRET"), "leak");
}

TEST_F(ProcessTest, WithoutInheritOnlyWhatIsSet) {
  EnvOptions o;
  o.inherit = false;
  o.set = {{"A", "1"}};
  o.defaults = {{"A", "2"}, {"B", "3"}};
  EXPECT_EQ(BuildEnvironment(o), (std::vector<std::string>{"A=1", "B=3"}));
}

TEST_F(ProcessTest, CwdAndPathLookup) {
  fs::create_directories(Path("work"));
  SpawnOptions o;
  o.argv = {"sh", "-c", "pwd"};  // found on PATH
  o.cwd = Path("work");
  o.log_path = Path("out.log");
  auto p = Process::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(p->Wait(10).has_value());
  EXPECT_NE(Read(Path("out.log")).find(fs::canonical(Path("work")).string()), std::string::npos);
}

TEST_F(ProcessTest, ProgramsThatCannotRunAreErrorsNamingThem) {
  SpawnOptions o;
  o.argv = {"no-such-program-xyz"};
  auto p = Process::Spawn(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("no-such-program-xyz"), std::string::npos);
  o.argv = {Path("missing.sh")};
  EXPECT_FALSE(Process::Spawn(o).ok());
  o.argv = {"/bin/true"};
  o.cwd = Path("no-such-dir");
  auto q = Process::Spawn(o);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("no-such-dir"), std::string::npos);
  o.argv.clear();
  EXPECT_FALSE(Process::Spawn(o).ok());
}

TEST_F(ProcessTest, LogIsNeverOpenedThroughASymlink) {
  const std::string target = Path("elsewhere.txt");
  { std::ofstream(target) << "precious\n"; }
  fs::create_symlink(target, Path("link.log"));
  SpawnOptions o = Sh("echo overwritten");
  o.log_path = Path("link.log");
  auto p = Process::Spawn(o);
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(Read(target), "precious\n");
}

TEST_F(ProcessTest, SignalDeathIsReported) {
  auto p = Process::Spawn(Sh("kill -KILL $$"));
  ASSERT_TRUE(p.ok());
  auto e = p->Wait(10);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_NE(e->Describe().find("signal 9"), std::string::npos);
}

TEST_F(ProcessTest, StopReachesGrandchildrenInTheGroup) {
  auto p = Process::Spawn(Sh("sleep 100 & echo $! > " + Path("grandchild.pid") + "; wait"));
  ASSERT_TRUE(p.ok());
  const pid_t grandchild = ReadPid(Path("grandchild.pid"));
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(::getpgid(grandchild), p->pid());  // the child leads its own group
  EXPECT_NE(::getpgid(p->pid()), ::getpgrp());
  const ExitStatus e = p->Stop(5);
  EXPECT_EQ(e.signal, SIGTERM);
  EXPECT_TRUE(WaitGone(grandchild, 5s));
}

TEST_F(ProcessTest, StopEscalatesToSigkillAfterTheGrace) {
  // SIGTERM ignored by the shell and (inherited) by its sleep.
  auto p = Process::Spawn(Sh("trap '' TERM; echo ready; sleep 100 & echo $! > " + Path("sleep.pid") + "; wait"));
  ASSERT_TRUE(p.ok());
  const pid_t sleeper = ReadPid(Path("sleep.pid"));
  ASSERT_GT(sleeper, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const ExitStatus e = p->Stop(0.5);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_GE(took, 450ms);
  EXPECT_LT(took, 10s);
  EXPECT_TRUE(WaitGone(sleeper, 5s));
}

TEST_F(ProcessTest, StopAllStopsEveryChild) {
  auto a = Process::Spawn(Sh("sleep 100"));
  auto b = Process::Spawn(Sh("trap '' TERM; touch " + Path("b.ready") + "; sleep 100"));
  auto c = Process::Spawn(Sh("exit 0"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_TRUE(c->Wait(10).has_value());  // one already ended is left as it was
  // b ignores SIGTERM only once its shell has set the trap: wait for that, or
  // a loaded machine delivers the TERM first and b dies of it.
  for (int i = 0; i < 1000 && !fs::exists(Path("b.ready")); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(fs::exists(Path("b.ready")));
  StopAll({&*a, &*b, &*c}, 0.3);
  EXPECT_FALSE(a->running());
  EXPECT_FALSE(b->running());
  EXPECT_FALSE(c->running());
  EXPECT_EQ(a->Poll()->signal, SIGTERM);
  EXPECT_EQ(b->Poll()->signal, SIGKILL);
  EXPECT_TRUE(c->Poll()->ok());
}

TEST_F(ProcessTest, DestroyingARunningChildKillsAndReapsIt) {
  pid_t pid = -1;
  {
    auto p = Process::Spawn(Sh("sleep 100"));
    ASSERT_TRUE(p.ok());
    pid = p->pid();
  }
  EXPECT_TRUE(ProcessGone(pid));
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);  // already reaped
}

// A helper process spawns `sleep` (with or without die_with_parent), reports
// the sleeper's pid, then is SIGKILLed: returns the sleeper's pid.
pid_t SpawnUnderDoomedParent(const std::string& dir, bool die_with_parent) {
  const std::string pid_file = dir + (die_with_parent ? "/dies.pid" : "/lives.pid");
  const pid_t helper = ::fork();
  if (helper == 0) {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "echo $$ > " + pid_file + "; exec sleep 100"};
    o.die_with_parent = die_with_parent;
    auto p = Process::Spawn(o);
    if (!p.ok()) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  const pid_t child = ReadPid(pid_file);
  ::kill(helper, SIGKILL);
  ::waitpid(helper, nullptr, 0);
  return child;
}

TEST_F(ProcessTest, DieWithParentKillsTheChildWhenItsParentIsKilled) {
  const pid_t orphan_candidate = SpawnUnderDoomedParent(dir_.string(), /*die_with_parent=*/true);
  ASSERT_GT(orphan_candidate, 0);
  EXPECT_TRUE(WaitGone(orphan_candidate, 5s));
  // Without it the child outlives its parent (what the option prevents).
  const pid_t survivor = SpawnUnderDoomedParent(dir_.string(), /*die_with_parent=*/false);
  ASSERT_GT(survivor, 0);
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(ProcessGone(survivor));
  ::kill(-survivor, SIGKILL);  // it leads its own group
  ::kill(survivor, SIGKILL);
}

// What replaced popen: stdout through a pipe, stderr kept apart, merged or
// dropped, and the exit seen after the output ended.
TEST_F(ProcessTest, RunCapturingStdoutReadsTheOutputAndTheExit) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo out-line; echo err-line >&2; exit 4"};
  o.log_path = Path("ignored.log");  // replaced by the pipe
  auto merged = RunCapturingStdout(o, CapturedStderr::kMerge);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ(merged->out, "out-line\nerr-line\n");
  EXPECT_EQ(merged->exit.code, 4);
  auto dropped = RunCapturingStdout(o, CapturedStderr::kDiscard);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(dropped->out, "out-line\n");
  EXPECT_FALSE(fs::exists(Path("ignored.log")));
  o.argv = {Path("missing")};
  auto missing = RunCapturingStdout(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos);
}

}  // namespace
}  // namespace shard
