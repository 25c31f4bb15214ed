// The graceful stop (a Slurm preemption's SIGUSR1 reaching the workers): one
// rank's DistContext.stop_requested says yes at some step; every rank must
// stop after that same step with its checkpoint written, and a new run that
// resumes from it must end with the weights of an uninterrupted run, bit for
// bit. Ranks are threads over the local communicator.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "shard/ckpt/catalog.h"
#include "shard/train/trainer.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

constexpr int kWorld = 2;
constexpr int kSteps = 6;

std::string Tokens() {
  static std::string path = [] {
    std::string p = testing::TempDir() + "/stop_request." + std::to_string(::getpid()) + ".u32";
    std::mt19937 rng(5);
    std::vector<uint32_t> t(12000);
    for (auto& x : t) x = rng() % 256;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
    return p;
  }();
  return path;
}

struct Outcome {
  std::vector<int64_t> steps;    // per rank: trainer step when Run returned
  std::vector<bool> stopped;     // per rank
  std::vector<std::vector<float>> params;  // rank 0's gathered units at the end
};

// Runs kWorld ranks to the end (or until the stop); `vote(rank, call)` is
// each rank's stop_requested, `call` counting its polls from 1.
Outcome RunRanks(const std::string& dir, const std::string& resume,
            const std::function<bool(int rank, int call)>& vote) {
  static std::atomic<int> run{0};
  const std::string prefix = "stop-" + std::to_string(run++) + "/";
  const std::string yaml = "name: s\nmodel: {preset: tiny}\ndata: {tokens: " + Tokens() +
                           ", seq_len: 16, shuffle: true}\ntrain: {steps: " + std::to_string(kSteps) +
                           ", global_batch: 4, micro_batch: 2, lr: 3.0e-3, log_every: 1000}\n"
                           "parallel: {world_size: 2}\ncheckpoint: {dir: " + dir +
                           ", every_steps: 0, async: true, resume: " + resume + "}\nresources: {device: cpu}\n";
  Outcome out;
  out.steps.resize(kWorld);
  out.stopped.resize(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      auto job = ParseJobConfig(yaml, "job.yaml");
      ASSERT_TRUE(job.ok()) << job.status().ToString();
      DistContext d;
      d.rank = r;
      d.world = kWorld;
      d.comm_backend = "local";
      d.prefix = prefix;
      auto calls = std::make_shared<int>(0);
      d.stop_requested = [&vote, r, calls] { return vote(r, ++*calls); };
      auto t = Trainer::Create(*job, d);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      Status st = (*t)->Run();
      ASSERT_TRUE(st.ok()) << st.ToString();
      out.steps[r] = (*t)->step();
      out.stopped[r] = (*t)->stopped();
      std::vector<std::vector<float>> units((*t)->layout().num_units());
      for (int u = 0; u < (*t)->layout().num_units(); ++u) ASSERT_TRUE((*t)->UnitParams(u, &units[u]).ok());
      if (r == 0) out.params = units;
    });
  }
  for (auto& th : threads) th.join();
  return out;
}

std::string NewDir(const std::string& name) {
  std::string tmpl = testing::TempDir() + "/stop_request_" + name + "_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

TEST(StopRequestTest, EveryRankStopsAtTheSameStepWithACheckpointAndResumesExactly) {
  const std::string ref_dir = NewDir("ref"), dir = NewDir("stop");
  const Outcome ref = RunRanks(ref_dir, "none", [](int, int) { return false; });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(ref.steps[r], kSteps);
    EXPECT_FALSE(ref.stopped[r]);
  }

  // Only rank 1 is asked, at its third step: both ranks stop after step 3.
  const Outcome stopped = RunRanks(dir, "none", [](int rank, int call) { return rank == 1 && call >= 3; });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(stopped.stopped[r]) << "rank " << r;
    EXPECT_EQ(stopped.steps[r], 3) << "rank " << r;
  }
  auto latest = FindLatestGoodStep(dir + "/s", /*verify_checksums=*/true);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(fs::path(*latest).filename().string(), StepDirName(3));

  const Outcome resumed = RunRanks(dir, "auto", [](int, int) { return false; });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(resumed.steps[r], kSteps);
    EXPECT_FALSE(resumed.stopped[r]);
  }
  ASSERT_EQ(resumed.params.size(), ref.params.size());
  for (size_t u = 0; u < ref.params.size(); ++u)
    EXPECT_EQ(resumed.params[u], ref.params[u]) << "unit " << u << " differs from the uninterrupted run";
  std::error_code ec;
  fs::remove_all(ref_dir, ec);
  fs::remove_all(dir, ec);
}

TEST(StopRequestTest, AStopAskedAtTheLastStepJustFinishes) {
  const std::string dir = NewDir("last");
  const Outcome o = RunRanks(dir, "none", [](int rank, int call) { return rank == 0 && call >= kSteps; });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(o.steps[r], kSteps);
    EXPECT_FALSE(o.stopped[r]) << "a run that finished is not a stopped one";
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace shard
