// FSDP runtimes with ranks as threads over a local communicator: a runtime
// per rank driven by a test body. Shared by the fsdp unit tests.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/comm/communicator.h"
#include "shard/fsdp/fsdp_runtime.h"

namespace shard::fsdp_testing {

// Rank `rank` of a `world`-rank local communicator group named `prefix`; null
// for one rank (the runtime needs none then).
inline std::unique_ptr<Communicator> LocalComm(int world, int rank, const std::string& prefix) {
  if (world <= 1) return nullptr;
  CommConfig cc;
  cc.backend = "local";
  cc.rank = rank;
  cc.world_size = world;
  cc.prefix = prefix;
  auto c = CreateCommunicator(cc);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

// Runs body(runtime, rank) on `world` threads, each with its own CPU backend
// and a runtime over units of `numels` in one local shard group.
inline void RunRuntimeRanks(int world, const FsdpOptions& opts, const std::vector<int64_t>& numels,
                            const std::function<void(FsdpRuntime&, int)>& body) {
  static std::atomic<int> group{0};
  const std::string prefix = "fsdp-runtime-ranks-" + std::to_string(group++) + "/";
  std::vector<std::thread> threads;
  std::atomic<int> ran{0};
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto backend = CreateBackend("cpu");
      ASSERT_TRUE(backend.ok());
      auto rt = FsdpRuntime::Create(backend->get(), numels, opts, LocalComm(world, r, prefix), nullptr);
      ASSERT_TRUE(rt.ok()) << rt.status().ToString();
      body(**rt, r);
      ++ran;
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(ran.load(), world);
}

}  // namespace shard::fsdp_testing
