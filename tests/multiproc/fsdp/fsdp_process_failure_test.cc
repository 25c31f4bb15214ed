// Multi-process FSDP through the real binary (fsdp_process_test_util.h),
// when it goes wrong: a SIGKILLed or SIGSTOPped peer or a peer that never
// starts makes rank 0 exit non-zero with a clear one-line reason, bounded by
// the configured timeout; inconsistent --rank / --world / --rendezvous exit 2
// at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/multiproc/fsdp/fsdp_process_test_util.h"

namespace shard::testing {
namespace {

// SIGKILL rank 1 mid-run: rank 0 must not hang; it exits non-zero within the
// collective timeout (plus start-up slack) naming what failed.
TEST_F(FsdpProcessTest, KilledPeerFailsTheSurvivorPromptly) {
  constexpr double kTimeout = 5;
  const std::string dir = NewRunDir("kill");
  std::vector<Proc> procs;
  ReapOnExit reap(&procs);
  auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(StartPairMidRun(dir, &procs, t0));
  ASSERT_EQ(::kill(procs[1].pid, SIGKILL), 0);
  auto t_kill = Clock::now();
  WaitAll(&procs, Since(t0) + kTimeout + 30, t0);
  const double took = std::chrono::duration<double>(Clock::now() - t_kill).count();
  EXPECT_TRUE(WIFSIGNALED(procs[1].status) && WTERMSIG(procs[1].status) == SIGKILL);
  EXPECT_TRUE(WIFEXITED(procs[0].status) && WEXITSTATUS(procs[0].status) != 0)
      << "rank 0: " << Describe(procs[0].status);
  // The TCP connection drops at once, so failing well inside the timeout is the
  // expected path; the timeout is the bound.
  EXPECT_LT(took, kTimeout + 5) << "rank 0 took " << took << " s to notice its dead peer";
  const std::string err = ReadAll(procs[0].err);
  std::printf("[ measured ] rank 0 exited %.2f s after the kill: %s", took, err.c_str());
  EXPECT_EQ(NonEmptyLines(err).size(), 1u) << err;
  EXPECT_NE(err.find("shardd-worker: "), std::string::npos) << err;
  // Names the collective and the unit or peer, and says what probably happened.
  EXPECT_TRUE(err.find("all-gather") != std::string::npos || err.find("reduce-scatter") != std::string::npos ||
              err.find("all-reduce") != std::string::npos)
      << err;
  EXPECT_TRUE(err.find("peer") != std::string::npos || err.find("rank") != std::string::npos) << err;
}

// SIGSTOP rank 1 mid-run: its sockets stay open, so only the collective
// timeout can free rank 0. It must exit non-zero after about that timeout.
TEST_F(FsdpProcessTest, StoppedPeerTimesOutTheSurvivor) {
  constexpr double kTimeout = 5;
  const std::string dir = NewRunDir("stop");
  std::vector<Proc> procs;
  ReapOnExit reap(&procs);
  auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(StartPairMidRun(dir, &procs, t0));
  ASSERT_EQ(::kill(procs[1].pid, SIGSTOP), 0);
  auto t_stop = Clock::now();
  std::vector<Proc> survivor = {procs[0]};
  WaitAll(&survivor, Since(t0) + kTimeout + 30, t0);
  procs[0] = survivor[0];
  const double took = std::chrono::duration<double>(Clock::now() - t_stop).count();
  ::kill(procs[1].pid, SIGKILL);  // SIGKILL ends a stopped process too
  WaitAll(&procs, Since(t0) + 30, t0);
  EXPECT_TRUE(WIFEXITED(procs[0].status) && WEXITSTATUS(procs[0].status) != 0)
      << "rank 0: " << Describe(procs[0].status);
  // One collective may have been in flight when the stop landed, so rank 0
  // waits between ~0 and one timeout for it, then one timeout at most for the
  // next; a little over the timeout is the usual case.
  EXPECT_LT(took, 2 * kTimeout + 5) << "rank 0 took " << took << " s to give up on its stopped peer";
  const std::string err = ReadAll(procs[0].err);
  std::printf("[ measured ] rank 0 exited %.2f s after the stop: %s", took, err.c_str());
  EXPECT_EQ(NonEmptyLines(err).size(), 1u) << err;
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
}

// Rank 0 started alone: the rendezvous gives up after the configured timeout
// and says who is missing.
TEST_F(FsdpProcessTest, MissingPeerFailsRendezvousWithinTimeout) {
  constexpr double kTimeout = 3;
  const std::string dir = NewRunDir("alone");
  std::vector<Proc> procs;
  auto t0 = Clock::now();
  procs.push_back(Start(dir, Args(dir, 0, 2, {"parallel.comm_timeout_s=3"}), "rank0"));
  WaitAll(&procs, kTimeout + 30, t0);
  const double took = procs[0].exit_s;
  EXPECT_TRUE(WIFEXITED(procs[0].status) && WEXITSTATUS(procs[0].status) != 0) << Describe(procs[0].status);
  EXPECT_GE(took, kTimeout - 0.5);
  EXPECT_LT(took, kTimeout + 10);
  const std::string err = ReadAll(procs[0].err);
  std::printf("[ measured ] lone rank 0 exited after %.2f s: %s", took, err.c_str());
  EXPECT_EQ(NonEmptyLines(err).size(), 1u) << err;
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
  EXPECT_NE(err.find("rank"), std::string::npos) << err;
}

// Inconsistent launch flags are refused before any rendezvous: exit code 2 and
// one line on stderr.
TEST_F(FsdpProcessTest, BadLaunchFlagsExitTwoWithOneLine) {
  const std::string dir = NewRunDir("bad");
  const std::string store = "file:" + dir + "/store";
  const std::string cfg = root_ + "/job.yaml";
  struct Case {
    std::string what;
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"rank == world",
       {"--standalone", "--config", cfg, "--set", "parallel.world_size=2", "--rank", "2", "--world", "2",
        "--rendezvous", store},
       "rank 2"},
      {"rank > world",
       {"--standalone", "--config", cfg, "--set", "parallel.world_size=2", "--rank", "5", "--world", "2",
        "--rendezvous", store},
       "rank 5"},
      {"negative rank",
       {"--standalone", "--config", cfg, "--set", "parallel.world_size=2", "--rank", "-1", "--world", "2",
        "--rendezvous", store},
       "rank -1"},
      {"world != parallel.world_size",
       {"--standalone", "--config", cfg, "--set", "parallel.world_size=2", "--rank", "0", "--world", "4",
        "--rendezvous", store},
       "world_size"},
      {"no rendezvous",
       {"--standalone", "--config", cfg, "--set", "parallel.world_size=2", "--rank", "0", "--world", "2"},
       "--rendezvous"},
      {"no rendezvous, world from the job",
       {"--standalone", "--config", cfg, "--set", "parallel.world_size=2", "--rank", "1"},
       "--rendezvous"},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--log-level", "warn"});
    std::vector<Proc> procs = {Start(dir, args, "bad" + std::to_string(i++))};
    auto t0 = Clock::now();
    WaitAll(&procs, 20, t0);
    EXPECT_TRUE(WIFEXITED(procs[0].status) && WEXITSTATUS(procs[0].status) == 2) << Describe(procs[0].status);
    // Refused before any rendezvous: nothing was published to the store (the
    // exit time is no measure on a loaded machine; a waiting rank would run
    // into WaitAll's deadline instead).
    const bool published = fs::exists(dir + "/store") && !fs::is_empty(dir + "/store");
    EXPECT_FALSE(published) << "a refused launch wrote to the rendezvous store";
    const std::string err = ReadAll(procs[0].err);
    EXPECT_EQ(NonEmptyLines(err).size(), 1u) << err;
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
    EXPECT_EQ(ReadAll(procs[0].out), "");
  }
}

}  // namespace
}  // namespace shard::testing
