// The local launcher with real processes: tiny shell scripts stand in for
// shardd-worker. Exits are seen with their code or signal, Terminate reaches
// every rank and whatever it started (process groups), logs hold each rank's
// output, the attempt token is passed and the admin token is not, and adopted
// processes are watched by liveness only.
#include "coordinator/launchers/local/local_launcher.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using namespace std::chrono_literals;

// Gone, or a zombie nobody reaped yet (a container's pid 1 may never reap):
// either way it runs no more.
bool ProcessGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = ReadBytes("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

class LocalLauncherTest : public ScratchTest {
 protected:
  // Writes an executable script and a request to run it with `world` ranks.
  LaunchRequest Request(const std::string& body, int world = 2, int attempt = 1) {
    const std::string script = Path("worker.sh");
    WriteBytes(script, "#!/bin/sh\n" + body + "\n");
    EXPECT_EQ(::chmod(script.c_str(), 0755), 0);
    fs::create_directories(Path("work"));
    LaunchRequest req;
    req.job_id = "tiny-1";
    req.attempt = attempt;
    req.world = world;
    req.workdir = Path("work");
    req.log_dir = Path("logs/attempt_" + std::to_string(attempt));
    req.coordinator = "127.0.0.1:7000";
    req.worker_bin = script;
    req.env["SHARDD_WORKER_TOKEN"] = "attempt-token";
    return req;
  }
  // Polls until `n` exits were seen (5 s at most).
  std::vector<RankExit> PollExits(LocalLauncher& l, size_t n) {
    std::vector<RankExit> all;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (all.size() < n && std::chrono::steady_clock::now() < deadline) {
      for (RankExit& e : l.Poll()) all.push_back(e);
      if (all.size() < n) std::this_thread::sleep_for(5ms);
    }
    std::sort(all.begin(), all.end(), [](const RankExit& a, const RankExit& b) { return a.rank < b.rank; });
    return all;
  }
  // Waits until the file holds `text` (5 s at most).
  bool WaitForText(const std::string& path, const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Contains(ReadBytes(path), text)) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
};

TEST_F(LocalLauncherTest, RunningRanksLogTheirArgsAndDieBySigterm) {
  ::setenv("SHARDD_TOKEN", "admin-secret", 1);
  LocalLauncher l;
  LaunchRequest req = Request(
      "echo \"rank args: $@\"; echo \"cwd=$(pwd) token=$SHARDD_WORKER_TOKEN admin=[$SHARDD_TOKEN]\"; echo ready; "
      "sleep 30");
  auto pids = l.Launch(req);
  ::unsetenv("SHARDD_TOKEN");
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  ASSERT_EQ(pids->size(), 2u);
  EXPECT_GT((*pids)[0], 0);
  EXPECT_NE((*pids)[0], (*pids)[1]);
  EXPECT_EQ(l.Running("tiny-1", 1), 2);
  EXPECT_EQ(l.Running("tiny-1", 2), 0);

  const std::string log1 = req.log_dir + "/rank_1.log";
  ASSERT_TRUE(WaitForText(log1, "ready")) << ReadBytes(log1);
  const std::string text = ReadBytes(log1);
  EXPECT_TRUE(Contains(text, "rank args: --coordinator 127.0.0.1:7000 --job tiny-1 --attempt 1 --rank 1")) << text;
  EXPECT_TRUE(Contains(text, "cwd=" + Path("work"))) << text;
  EXPECT_TRUE(Contains(text, "token=attempt-token")) << text;
  EXPECT_TRUE(Contains(text, "admin=[]")) << "the admin token leaked to a worker: " << text;
  ASSERT_TRUE(WaitForText(req.log_dir + "/rank_0.log", "--rank 0"));
  EXPECT_TRUE(l.Poll().empty());

  l.Terminate("tiny-1", 2, /*force=*/false);  // another attempt: nothing happens
  EXPECT_TRUE(l.Poll().empty());
  l.Terminate("tiny-1", 1, /*force=*/false);
  auto exits = PollExits(l, 2);
  ASSERT_EQ(exits.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(exits[r].rank, r);
    EXPECT_EQ(exits[r].job_id, "tiny-1");
    EXPECT_EQ(exits[r].attempt, 1);
    EXPECT_EQ(exits[r].signal, SIGTERM);
    EXPECT_TRUE(Contains(exits[r].Describe(), "killed by signal 15")) << exits[r].Describe();
  }
  EXPECT_EQ(l.Running("tiny-1", 1), 0);
  EXPECT_TRUE(l.Poll().empty()) << "an exit was reported twice";
}

// Workers inherit shardd's environment, but not its own TLS files (shardd's
// sbatch script passes its server certificate as SHARDD_TLS_CERT), and what
// the request sets replaces an inherited value rather than following it.
TEST_F(LocalLauncherTest, WorkersGetTheRequestsTlsFilesNotTheCoordinators) {
  ::setenv("SHARDD_TLS_CA", "/coordinator/ca.pem", 1);
  ::setenv("SHARDD_TLS_CERT", "/coordinator/server.pem", 1);
  ::setenv("SHARDD_TLS_KEY", "/coordinator/server.key", 1);
  ::setenv("SHARDD_TEST_INHERITED", "kept", 1);
  LocalLauncher l;
  LaunchRequest req =
      Request("echo \"tls=[$SHARDD_TLS_CA|${SHARDD_TLS_CERT:-unset}|${SHARDD_TLS_KEY:-unset}] "
              "other=$SHARDD_TEST_INHERITED\"",
              1);
  req.env["SHARDD_TLS_CA"] = "/request/ca.pem";
  auto pids = l.Launch(req);
  for (const char* v : {"SHARDD_TLS_CA", "SHARDD_TLS_CERT", "SHARDD_TLS_KEY", "SHARDD_TEST_INHERITED"}) ::unsetenv(v);
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  ASSERT_EQ(PollExits(l, 1).size(), 1u);
  const std::string text = ReadBytes(req.log_dir + "/rank_0.log");
  EXPECT_TRUE(Contains(text, "tls=[/request/ca.pem|unset|unset]")) << text;
  EXPECT_TRUE(Contains(text, "other=kept")) << text;
}

TEST_F(LocalLauncherTest, ExitCodesAndForcedKillsAreReported) {
  LocalLauncher l;
  auto pids = l.Launch(Request("exit 7", 1));
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  auto exits = PollExits(l, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].signal, 0);
  EXPECT_EQ(exits[0].exit_code, 7);
  EXPECT_EQ(exits[0].Describe(), "rank 0 exited with code 7");

  // SIGTERM ignored: only the forced kill works.
  LaunchRequest stubborn = Request("trap '' TERM; echo ready; while :; do sleep 0.05; done", 1, 2);
  ASSERT_TRUE(l.Launch(stubborn).ok());
  ASSERT_TRUE(WaitForText(stubborn.log_dir + "/rank_0.log", "ready"));
  l.Terminate("tiny-1", 2, /*force=*/false);
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(l.Poll().empty()) << "a process that ignores SIGTERM ended";
  EXPECT_EQ(l.Running("tiny-1", 2), 1);
  l.Terminate("tiny-1", 2, /*force=*/true);
  exits = PollExits(l, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].signal, SIGKILL);
}

// A worker's children share its process group: Terminate reaches them, and a
// rank that exits takes what it left running with it.
TEST_F(LocalLauncherTest, TerminateAndExitReachTheWholeProcessGroup) {
  LocalLauncher l;
  LaunchRequest req = Request("sleep 1000 & echo $! > child.pid; echo ready; wait", 1);
  ASSERT_TRUE(l.Launch(req).ok());
  const std::string pid_file = Path("work/child.pid");
  ASSERT_TRUE(WaitForText(req.log_dir + "/rank_0.log", "ready"));
  const pid_t child = std::stoi(ReadBytes(pid_file));
  EXPECT_FALSE(ProcessGone(child));
  l.Terminate("tiny-1", 1, /*force=*/false);
  ASSERT_EQ(PollExits(l, 1).size(), 1u);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!ProcessGone(child) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(ProcessGone(child)) << "the worker's child " << child << " survived Terminate";

  LaunchRequest leaves = Request("sleep 1000 & echo $! > left.pid; exit 3", 1, 2);
  ASSERT_TRUE(l.Launch(leaves).ok());
  auto exits = PollExits(l, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 3);
  const pid_t left = std::stoi(ReadBytes(Path("work/left.pid")));
  const auto deadline2 = std::chrono::steady_clock::now() + 5s;
  while (!ProcessGone(left) && std::chrono::steady_clock::now() < deadline2) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(ProcessGone(left)) << "the exited worker's child " << left << " was left running";
}

TEST_F(LocalLauncherTest, NonExecutableWorkerIsNotFoundNamingIt) {
  LocalLauncher l;
  LaunchRequest req = Request("exit 0");
  ASSERT_EQ(::chmod(req.worker_bin.c_str(), 0644), 0);
  auto pids = l.Launch(req);
  ASSERT_FALSE(pids.ok());
  EXPECT_EQ(pids.status().code(), shard::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(pids.status().message(), req.worker_bin)) << pids.status().ToString();
  EXPECT_EQ(l.Running("tiny-1", 1), 0);
}

TEST_F(LocalLauncherTest, DestructorLeavesNoOrphans) {
  std::vector<int> pids;
  {
    LocalLauncher l;
    auto p = l.Launch(Request("sleep 1000"));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pids = *p;
  }
  for (int pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

// shardd stopped by SIGTERM lets its workers go (StopLeavingWorkers): they run
// on after the launcher is gone, launched and adopted ones alike, for the next
// coordinator on the state dir to adopt.
TEST_F(LocalLauncherTest, ReleasedWorkersOutliveTheLauncher) {
  std::vector<int> pids;
  {
    LocalLauncher l;
    auto p = l.Launch(Request("sleep 1000"));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pids = *p;
    l.Adopt("tiny-1", 2, {pids[0]});  // watched twice over: neither kills it
    l.Release();
    EXPECT_EQ(l.Running("tiny-1", 1), 0);
    EXPECT_TRUE(l.Poll().empty());
  }
  for (int pid : pids) {
    EXPECT_FALSE(ProcessGone(pid)) << "released worker " << pid << " was killed with the launcher";
    ::kill(-pid, SIGKILL);
  }
}

// Adopted processes are not our children: only their disappearance is seen,
// reported with exit code -1.
TEST_F(LocalLauncherTest, AdoptedProcessesAreWatchedByLiveness) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    // Adopt checks the command line names the job and attempt.
    ::execl("/bin/sh", "sh", "-c", "sleep 30; true", "shardd-worker", "--job", "tiny-1", "--attempt", "3",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  // Wait for the exec: Adopt reads the command line.
  for (int i = 0; i < 200; ++i) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find("--job") != std::string::npos) break;
    ::usleep(10000);
  }
  LocalLauncher l;
  l.Adopt("tiny-1", 3, {0, pid});  // rank 0's pid is unknown: not watched
  EXPECT_EQ(l.Running("tiny-1", 3), 1);
  EXPECT_TRUE(l.Poll().empty());
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  auto exits = PollExits(l, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].rank, 1);
  EXPECT_EQ(exits[0].attempt, 3);
  EXPECT_EQ(exits[0].exit_code, -1);
  EXPECT_EQ(exits[0].signal, 0);
  EXPECT_EQ(l.Running("tiny-1", 3), 0);
}

// Elastic restarts (restart.min_world_size) on one host: which of the job's
// GPUs a fresh probe still sees, by PCI bus id, and a launch on fewer ranks
// runs on exactly those, by their ordinals after the loss renumbered them.
class LocalLauncherGpusTest : public LocalLauncherTest {
 protected:
  // 8 GPUs at the start, gpu-0 .. gpu-7; `now_ids` is what the probe sees now.
  std::unique_ptr<LocalGpuWatch> Watch() {
    std::vector<std::string> start;
    for (int g = 0; g < 8; ++g) start.push_back("gpu-" + std::to_string(g));
    now_ids_ = start;
    return std::make_unique<LocalGpuWatch>(
        start,
        [this]() -> StatusOr<std::vector<std::string>> {
          ++probes_;
          if (!probe_error_.ok()) return probe_error_;
          return now_ids_;
        },
        [this] { return now_ms_; }, /*min_interval_ms=*/10000);
  }
  void Vanish(const std::string& id) { std::erase(now_ids_, id); }
  // The job holds GPUs 4-7 (its placement, as AddPlacementEnv passes it).
  LaunchRequest GpuRequest(int world, int attempt = 1) {
    LaunchRequest req = Request("echo \"devices=$CUDA_VISIBLE_DEVICES\"", world, attempt);
    req.env["CUDA_VISIBLE_DEVICES"] = "4,5,6,7";
    return req;
  }
  std::vector<std::string> now_ids_;
  Status probe_error_;
  int probes_ = 0;
  int64_t now_ms_ = 1'000'000;
};

TEST_F(LocalLauncherGpusTest, ShrunkLaunchRunsOnTheSurvivingDevicesByTheirOrdinalsNow) {
  LocalLauncher l(Watch());
  // GPU 5 of the job fell off the bus: the runtime now numbers gpu-6 as 5, gpu-7 as 6.
  Vanish("gpu-5");
  auto cap = l.Capacity(GpuRequest(4, 1));
  ASSERT_TRUE(cap.ok()) << cap.status().ToString();
  EXPECT_EQ(*cap, 3);
  auto pids = l.Launch(GpuRequest(3, 2));
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  ASSERT_EQ(pids->size(), 3u);
  PollExits(l, 3);
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(Contains(ReadBytes(Path("logs/attempt_2/rank_" + std::to_string(r) + ".log")), "devices=4,5,6\n"))
        << "rank " << r;
  EXPECT_EQ(probes_, 1);  // the launch used the count asked for just before (rate-limited)
}

TEST_F(LocalLauncherGpusTest, GrowsBackWhenTheProbeSeesTheDeviceAgainAndProbesAtMostEveryInterval) {
  LocalLauncher l(Watch());
  ASSERT_TRUE(l.Launch(GpuRequest(4, 1)).ok());  // a full launch: no probe, devices as placed
  EXPECT_EQ(probes_, 0);
  PollExits(l, 4);
  EXPECT_TRUE(Contains(ReadBytes(Path("logs/attempt_1/rank_3.log")), "devices=4,5,6,7\n"));
  Vanish("gpu-7");
  // The control loop's question has no environment: the job's devices are the last launch's.
  LaunchRequest ask;
  ask.job_id = "tiny-1";
  ask.attempt = 1;
  ask.world = 4;
  EXPECT_EQ(*l.Capacity(ask), 3);
  now_ids_.push_back("gpu-7");  // back (the last ordinal again)
  now_ms_ += 5000;
  EXPECT_EQ(*l.Capacity(ask), 3);  // within 10 s: the last probe's answer
  EXPECT_EQ(probes_, 1);
  now_ms_ += 5000;
  EXPECT_EQ(*l.Capacity(ask), 4);
  EXPECT_EQ(probes_, 2);
}

TEST_F(LocalLauncherGpusTest, TooFewLeftRefusesTheLaunchNamingTheDevices) {
  LocalLauncher l(Watch());
  for (const char* g : {"gpu-4", "gpu-5", "gpu-6"}) Vanish(g);
  EXPECT_EQ(*l.Capacity(GpuRequest(4)), 1);
  auto pids = l.Launch(GpuRequest(2, 2));
  ASSERT_FALSE(pids.ok());
  EXPECT_EQ(pids.status().code(), shard::StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(pids.status().message(), "cannot place 2 rank(s) of job tiny-1: only 1 of its GPUs 4,5,6,7 are left"))
      << pids.status().ToString();
  probe_error_ = shard::Unavailable("shardd-worker --probe: no CUDA device");
  now_ms_ += 10000;
  auto failed = l.Capacity(GpuRequest(4));
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(Contains(failed.status().message(), "GPU probe failed: shardd-worker --probe: no CUDA device"));
}

TEST_F(LocalLauncherGpusTest, CpuRanksHaveNoPlacementLimitAndLaunchUnchanged) {
  LocalLauncher l(Watch());
  LaunchRequest req = Request("echo \"devices=[$CUDA_VISIBLE_DEVICES]\"", 2);
  req.env["CUDA_VISIBLE_DEVICES"] = "";  // a CPU job's placement
  auto cap = l.Capacity(req);
  ASSERT_FALSE(cap.ok());
  EXPECT_EQ(cap.status().code(), shard::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(cap.status().message(), "job tiny-1 runs on CPU ranks, which have no placement limit"));
  req.world = 1;
  ASSERT_TRUE(l.Launch(req).ok());
  PollExits(l, 1);
  EXPECT_TRUE(Contains(ReadBytes(Path("logs/attempt_1/rank_0.log")), "devices=[]\n"));
  EXPECT_EQ(probes_, 0);
  // Without a probe the launcher cannot count GPUs either.
  LocalLauncher plain;
  EXPECT_EQ(plain.Capacity(GpuRequest(4)).status().code(), shard::StatusCode::kUnimplemented);
}

TEST(LocalGpusTest, SurvivorsAreFoundByIdNotByOrdinal) {
  const std::vector<std::string> start = {"a", "b", "c", "d"};
  EXPECT_EQ(SurvivingOrdinals({0, 1, 2, 3}, start, {"a", "c", "d"}), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(SurvivingOrdinals({2, 3}, start, {"a", "c", "d"}), (std::vector<int>{1, 2}));
  EXPECT_EQ(SurvivingOrdinals({1}, start, {"a", "c", "d"}), (std::vector<int>{}));
  EXPECT_EQ(*ParseDeviceList("4,5,6"), (std::vector<int>{4, 5, 6}));
  EXPECT_FALSE(ParseDeviceList("GPU-1234").ok());
}

}  // namespace
}  // namespace shardd::testing
