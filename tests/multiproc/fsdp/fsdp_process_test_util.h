// The helpers of the multi-process FSDP tests (fsdp_process_test.cc,
// fsdp_process_failure_test.cc), over multiproc_test_util.h: the worker binary, started workers and
// their reaping, per-step metrics lines, and the fixture that trains the tiny
// job at W ranks through `shardd-worker --standalone` (Gloo over loopback, a
// FileKvStore rendezvous in a fresh temp directory, a unique --run-id per
// run), every worker with one compute thread and one OpenBLAS thread.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shard/ckpt/safetensors.h"
#include "tests/multiproc/multiproc_test_util.h"

namespace shard::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::string WorkerBinary() {
  const char* bin = std::getenv("SHARDD_BIN_DIR");
  return std::string(bin ? bin : "build") + "/worker/shardd-worker";
}

// One started worker: its pid and where its output goes.
struct Proc {
  pid_t pid = -1;
  std::string out, err, metrics;
  int status = -1;  // raw wait status once reaped
  double exit_s = -1;
};

// Per-step metrics lines of one rank.
struct StepLine {
  int64_t step;
  double loss, grad_norm;
};

inline std::vector<StepLine> ReadMetrics(const std::string& path) {
  std::vector<StepLine> out;
  for (const auto& line : NonEmptyLines(ReadAll(path))) {
    auto j = nlohmann::json::parse(line);
    out.push_back({j.at("step").get<int64_t>(), j.at("loss").get<double>(), j.at("grad_norm").get<double>()});
  }
  return out;
}

// SIGKILLs and reaps every process of `procs` not reaped yet when it goes out of
// scope, so a failed ASSERT never leaves workers behind.
class ReapOnExit {
 public:
  explicit ReapOnExit(std::vector<Proc>* procs) : procs_(procs) {}
  ~ReapOnExit() {
    for (auto& p : *procs_) {
      if (p.pid <= 0 || p.status != -1) continue;
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, &p.status, 0);
    }
  }

 private:
  std::vector<Proc>* procs_;
};

class FsdpProcessTest : public SuiteDirTest<FsdpProcessTest> {
 protected:
  static void SetUpTestSuite() {
    root_ = MakeSuiteDir("shardd-fsdp-mp-");
    ASSERT_FALSE(root_.empty()) << "cannot make a temporary folder";
    WritePhraseTokens(root_ + "/tokens.u32", 7, 64, 6, 19, 40000);
    std::ofstream(root_ + "/job.yaml") << TinyJobYaml("fsdp-mp", root_ + "/tokens.u32", 4,
                                                      "parallel: {world_size: 1}\n"
                                                      "resources: {device: cpu}\n");
  }
  // fork/exec one worker; stdout/stderr/metrics go to files in `dir`.
  static Proc Start(const std::string& dir, const std::vector<std::string>& args, const std::string& tag) {
    Proc p;
    p.out = dir + "/" + tag + ".out";
    p.err = dir + "/" + tag + ".err";
    std::vector<std::string> argv = {WorkerBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    p.pid = Spawn(std::move(argv), {}, {}, p.out, p.err);
    return p;
  }

  // Waits for every process up to `limit` seconds after `t0`, SIGKILLing the rest
  // (a hang is a test failure, never a hung test).
  static void WaitAll(std::vector<Proc>* procs, double limit, Clock::time_point t0) {
    size_t left = 0;
    for (auto& p : *procs) left += p.status == -1 ? 1 : 0;
    bool killed = false;
    while (left > 0) {
      for (auto& p : *procs) {
        if (p.status != -1) continue;
        int st = 0;
        if (::waitpid(p.pid, &st, WNOHANG) == p.pid) {
          p.status = st;
          p.exit_s = Since(t0);
          --left;
        }
      }
      if (left > 0 && !killed && Since(t0) > limit) {
        ADD_FAILURE() << "workers still running after " << limit << " s: killing them";
        for (auto& p : *procs)
          if (p.status == -1) ::kill(p.pid, SIGKILL);
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Starts ranks 0 and 1 of a full_shard run that trains until stopped (a 5 s
  // collective timeout) into *procs, and returns once rank 0 has logged three
  // steps, so what the test does next lands mid-training (fails the test when
  // rank 0 has made no progress 60 s after t0).
  static void StartPairMidRun(const std::string& dir, std::vector<Proc>* procs, Clock::time_point t0) {
    const std::vector<std::string> sets = {"train.steps=100000", "parallel.strategy=full_shard",
                                           "parallel.comm_timeout_s=5"};
    for (int r = 0; r < 2; ++r) procs->push_back(Start(dir, Args(dir, r, 2, sets), "rank" + std::to_string(r)));
    const std::string m0 = dir + "/metrics.0.jsonl";
    while (NonEmptyLines(ReadAll(m0)).size() < 3 && Since(t0) < 60) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_GE(NonEmptyLines(ReadAll(m0)).size(), 3u) << "rank 0 made no progress:\n" << ReadAll((*procs)[0].err);
  }

  // The common flags of rank `rank` of a `world`-rank run in `dir`.
  static std::vector<std::string> Args(const std::string& dir, int rank, int world,
                                       const std::vector<std::string>& sets) {
    std::vector<std::string> a = {"--standalone", "--config", root_ + "/job.yaml", "--log-level", "warn",
                                  "--rank", std::to_string(rank), "--world", std::to_string(world),
                                  "--rendezvous", "file:" + dir + "/store",
                                  "--run-id", fs::path(dir).filename().string(),
                                  "--metrics", dir + "/metrics." + std::to_string(rank) + ".jsonl",
                                  "--set", "parallel.world_size=" + std::to_string(world)};
    for (const auto& s : sets) {
      a.push_back("--set");
      a.push_back(s);
    }
    return a;
  }

  // Trains to completion with `world` ranks and exports the model; returns the run dir.
  std::string Train(int world, const std::vector<std::string>& sets) {
    std::string dir = NewRunDir("train-w" + std::to_string(world));
    std::vector<std::string> all = sets;
    all.push_back("export.hf_dir=" + dir + "/hf");
    std::vector<Proc> procs;
    auto t0 = Clock::now();
    for (int r = 0; r < world; ++r) procs.push_back(Start(dir, Args(dir, r, world, all), "rank" + std::to_string(r)));
    WaitAll(&procs, 120, t0);
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(WIFEXITED(procs[r].status) && WEXITSTATUS(procs[r].status) == 0)
          << "rank " << r << " of " << world << ": " << Describe(procs[r].status) << "\n"
          << ReadAll(procs[r].err);
    }
    return dir;
  }
};

}  // namespace shard::testing
