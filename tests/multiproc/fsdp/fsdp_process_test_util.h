// The helpers of the multi-process FSDP tests (fsdp_process_test.cc,
// fsdp_process_failure_test.cc): the worker binary, started workers and
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
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shard/ckpt/safetensors.h"

namespace shard::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> NonEmptyLines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

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

inline std::string Describe(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
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

class FsdpProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "shardd-fsdp-mp-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    // A token stream a tiny model can learn: random phrases over a 512-token vocabulary.
    std::mt19937 rng(7);
    std::vector<std::vector<uint32_t>> phrases(64);
    for (auto& p : phrases) {
      p.resize(6 + rng() % 19);
      for (auto& t : p) t = rng() % 512;
    }
    std::vector<uint32_t> toks;
    while (toks.size() < 40000) {
      const auto& p = phrases[rng() % phrases.size()];
      toks.insert(toks.end(), p.begin(), p.end());
    }
    std::ofstream(root_ + "/tokens.u32", std::ios::binary)
        .write(reinterpret_cast<const char*>(toks.data()), static_cast<std::streamsize>(toks.size() * 4));
    std::ofstream(root_ + "/job.yaml") << "name: fsdp-mp\n"
                                          "model: {preset: tiny}\n"
                                          "data: {tokens: " << root_ << "/tokens.u32, seq_len: 32, shuffle: true}\n"
                                          "train: {steps: 4, global_batch: 8, micro_batch: 2, lr: 3.0e-3, "
                                          "warmup_steps: 1, schedule: cosine, weight_decay: 0.1, grad_clip: 1.0, "
                                          "seed: 1234, log_every: 100}\n"
                                          "parallel: {world_size: 1}\n"
                                          "resources: {device: cpu}\n";
  }
  static void TearDownTestSuite() {
    if (!root_.empty() && !std::getenv("SHARDD_KEEP_TEST_DIR")) fs::remove_all(root_);
  }

  // A fresh directory for one run (rendezvous store, outputs).
  std::string NewRunDir(const std::string& name) {
    std::string d = root_ + "/" + name + "-" + std::to_string(++run_counter_);
    fs::create_directories(d);
    return d;
  }

  // fork/exec one worker; stdout/stderr/metrics go to files in `dir`.
  static Proc Start(const std::string& dir, const std::vector<std::string>& args, const std::string& tag) {
    Proc p;
    p.out = dir + "/" + tag + ".out";
    p.err = dir + "/" + tag + ".err";
    std::vector<std::string> argv = {WorkerBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::fflush(nullptr);
    p.pid = ::fork();
    if (p.pid == 0) {
      std::freopen(p.out.c_str(), "w", stdout);
      std::freopen(p.err.c_str(), "w", stderr);
      ::setenv("SHARDD_NUM_THREADS", "1", 1);
      ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::execv(cargv[0], cargv.data());
      std::fprintf(stderr, "exec %s failed\n", cargv[0]);
      ::_exit(127);
    }
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

  inline static std::string root_;
  int run_counter_ = 0;
};

}  // namespace shard::testing
