// Trainer ranks as threads: `world` Trainers of one job on the local
// communicator, each under its own rank, with a fresh rendezvous prefix per
// call, and `body(trainer, rank)` run on each rank's thread. The trainer tests
// share this instead of each spelling out threads, DistContext and Create.
// Also: a random token file and a fresh scratch folder for their job files.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shard/train/trainer.h"

namespace shard::testing_ranks {

// `base` carries what a test injects (stop_requested, gradient_hook); rank,
// world, comm_backend and prefix are set here. Returns the first rank's
// parse or Trainer::Create error (that rank's body does not run), else OK;
// what the bodies check is theirs to report.
inline Status OnTrainerRanks(const std::string& yaml, int world, const std::vector<std::string>& sets,
                             const std::function<void(Trainer&, int)>& body, const DistContext& base = {}) {
  static std::atomic<int> call{0};
  const std::string prefix = "trainer-ranks-" + std::to_string(call++) + "/";
  std::vector<Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto job = ParseJobConfig(yaml, "job.yaml", sets);
      if (!job.ok()) {
        status[r] = job.status();
        return;
      }
      DistContext d = base;
      d.rank = r;
      d.world = world;
      d.comm_backend = "local";
      d.prefix = prefix;
      auto t = Trainer::Create(*job, d);
      if (!t.ok()) {
        status[r] = t.status();
        return;
      }
      body(**t, r);
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : status)
    if (!s.ok()) return s;
  return OkStatus();
}

// 20,000 random tokens below 512 (seeded) in <TempDir>/<tag>.<pid>.u32,
// written on the first call for each tag.
inline std::string RandomTokens(const std::string& tag, uint32_t seed) {
  const std::string p = ::testing::TempDir() + "/" + tag + "." + std::to_string(::getpid()) + ".u32";
  if (std::filesystem::exists(p)) return p;
  std::mt19937 rng(seed);
  std::vector<uint32_t> t(20000);
  for (auto& x : t) x = rng() % 512;
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  return p;
}

// A new folder <TempDir>/<name>_XXXXXX, as a normalized path (as the
// checkpoint tiers name it in their messages).
inline std::string NewTempDir(const std::string& name) {
  std::string tmpl = ::testing::TempDir() + "/" + name + "_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return std::filesystem::path(tmpl).lexically_normal().string();
}

}  // namespace shard::testing_ranks
