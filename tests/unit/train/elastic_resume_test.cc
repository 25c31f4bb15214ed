// An elastic restart as the workers live it (shard::JobAtWorldSize, what
// shardd-worker applies to the world size its RegisterResponse carries):
// hybrid_shard over 4 ranks in groups of 2 checkpoints, "loses" a host, and
// the run continues from that step on 2 ranks, each running twice the
// micro-batches per step. Its loss at every step matches the uninterrupted
// 4-rank run within 1e-3 relative (only the fp32 summation order differs: the
// global batch, the data order and the loss normaliser are world-independent).
// Ranks are threads on the local communicator.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "shard/spec/elastic_world.h"
#include "shard/train/trainer.h"
#include "tests/unit/train/phrase_tokens.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 8, kCheckpointAt = 4;

JobConfig Job(const std::string& ckpt_dir, const std::string& resume) {
  static const std::string tokens = testing_tokens::MakePhraseTokens("elastic_resume", 20000, 256);
  const std::string yaml =
      "name: el\nmodel: {preset: tiny}\ndata: {tokens: " + tokens + ", seq_len: 32, shuffle: true}\n"
      "train: {steps: " + std::to_string(kSteps) + ", global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 2, "
      "seed: 7, log_every: 1000}\n"
      "parallel: {strategy: hybrid_shard, world_size: 4, shard_group_size: 2}\n"
      "checkpoint: {dir: " + ckpt_dir + ", every_steps: " + std::to_string(kCheckpointAt) + ", async: false, resume: " +
      resume + "}\n"
      "resources: {device: cpu, launcher: external}\n"
      "restart: {min_world_size: 2}\n";
  auto job = ParseJobConfig(yaml, "job.yaml");
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return job.ok() ? *job : JobConfig{};
}

// Trains `job` on `world` ranks (threads) up to `until`; returns rank 0's loss per step.
std::map<int64_t, double> Train(const JobConfig& job, int world, int until) {
  static int call = 0;
  const std::string prefix = "elastic-" + std::to_string(call++) + "/";
  std::map<int64_t, double> losses;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      DistContext d;
      d.rank = r;
      d.world = world;
      d.comm_backend = "local";
      d.prefix = prefix;
      auto t = Trainer::Create(job, d);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      while ((*t)->step() < until) {
        auto m = (*t)->Step();
        ASSERT_TRUE(m.ok()) << m.status().ToString();
        if (r != 0) continue;
        std::lock_guard<std::mutex> lock(mu);
        losses[m->step] = m->loss;
      }
    });
  }
  for (auto& t : threads) t.join();
  return losses;
}

std::string NewDir(const std::string& name) {
  std::string tmpl = ::testing::TempDir() + "/elastic_" + name + "_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

TEST(ElasticResumeTest, HalfTheRanksWithTwiceTheMicroBatchesKeepTheLossCurve) {
  const std::string ref_dir = NewDir("ref"), el_dir = NewDir("el");
  const std::map<int64_t, double> uninterrupted = Train(Job(ref_dir, "none"), 4, kSteps);
  ASSERT_EQ(uninterrupted.size(), static_cast<size_t>(kSteps));

  // The first attempt on 4 ranks commits step 4 (standalone ranks: rank 0 commits) and dies.
  const std::map<int64_t, double> first = Train(Job(el_dir, "none"), 4, kCheckpointAt);
  ASSERT_TRUE(fs::exists(el_dir + "/el/step_00000004/COMMITTED"));
  // The next attempt gets 2 ranks from the coordinator: the worker's job at that size.
  auto at2 = JobAtWorldSize(Job(el_dir, "auto"), 2);
  ASSERT_TRUE(at2.ok()) << at2.status().ToString();
  EXPECT_EQ(at2->parallel.world_size, 2);
  EXPECT_EQ(at2->train.global_batch, 8);
  EXPECT_EQ(MicroBatchesPerStep(*at2, 2), 2 * MicroBatchesPerStep(Job(el_dir, "auto"), 4));
  const std::map<int64_t, double> second = Train(*at2, 2, kSteps);
  ASSERT_EQ(second.size(), static_cast<size_t>(kSteps - kCheckpointAt)) << "did not resume from step 4";
  EXPECT_EQ(second.begin()->first, kCheckpointAt + 1);

  std::map<int64_t, double> elastic = first;
  elastic.insert(second.begin(), second.end());
  double worst = 0;
  for (const auto& [step, loss] : uninterrupted) {
    ASSERT_TRUE(elastic.count(step)) << "step " << step;
    const double rel = std::fabs(elastic[step] - loss) / std::fabs(loss);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 1e-3) << "step " << step << ": " << elastic[step] << " on 2 ranks vs " << loss << " on 4";
  }
  // Steps 1-4 ran the same way: identical.
  for (int64_t s = 1; s <= kCheckpointAt; ++s) EXPECT_EQ(elastic[s], uninterrupted.at(s)) << "step " << s;
  std::printf("elastic 4 -> 2 ranks: worst relative loss difference %.3g over %d steps\n", worst, kSteps);
  std::error_code ec;
  fs::remove_all(ref_dir, ec);
  fs::remove_all(el_dir, ec);
}

}  // namespace
}  // namespace shard
