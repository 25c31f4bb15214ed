// Shared by the communicator tests (ranks as threads here, forked processes in
// tests/multiproc/comm): value patterns whose sums are exact in float whatever the
// reduction order, reference results, and a runner for ranks as threads.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "shard/comm/communicator.h"
#include "shard/common/kv_stores.h"

// ASSERT_OK(status_expr) [<< more]: fails the test with the status's message.
#define ASSERT_OK(expr)                                              \
  switch (0)                                                         \
  case 0:                                                            \
  default:                                                           \
    if (const ::shard::Status _st = (expr); _st.ok()) {              \
    } else                                                           \
      FAIL() << _st.ToString() << " "

namespace shard::testing {

// Multiples of 1/16 below 2^16: every partial sum of up to 4 of them is exact in float.
inline float Value(int rank, int64_t i, int salt = 0) {
  return static_cast<float>((rank + 1) * 3 + salt) +
         static_cast<float>((i * 7 + salt) % 1024) / 16.0f;
}

inline std::vector<float> Pattern(int rank, int64_t n, int salt = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = Value(rank, i, salt);
  return v;
}

// Reduction over ranks 0..world-1 of Value(r, i, salt), as ReduceOp defines it.
inline double Reduced(ReduceOp op, int world, int64_t i, int salt = 0) {
  double acc = op == ReduceOp::kMax ? -1e30 : 0.0;
  for (int r = 0; r < world; ++r) {
    const double v = Value(r, i, salt);
    acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  return op == ReduceOp::kAvg ? acc / world : acc;
}

inline bool Near(double got, double want) {
  return std::fabs(got - want) <= 1e-5 * std::max(1.0, std::fabs(want));
}

// A fresh group name per call, so tests never share rendezvous keys.
inline std::string UniquePrefix(const std::string& what) {
  static std::atomic<int> counter{0};
  return "test/" + what + "/" + std::to_string(counter.fetch_add(1)) + "/";
}

inline CommConfig MakeConfig(const std::string& backend, int rank, int world,
                             std::shared_ptr<KvStore> store, const std::string& prefix,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  CommConfig c;
  c.backend = backend;
  c.rank = rank;
  c.world_size = world;
  c.store = std::move(store);
  c.prefix = prefix;
  c.timeout = timeout;
  return c;
}

// Runs `body(comm, rank)` on `world` threads, each with its own communicator of
// `backend` (gloo ranks rendezvous through one shared in-memory store). A failed
// creation is reported through `body` never running; the count of ranks that ran is
// returned.
inline int RunRanks(const std::string& backend, int world,
                    const std::function<void(Communicator&, int)>& body,
                    const std::string& prefix = UniquePrefix("ranks")) {
  auto store = std::make_shared<InMemoryKvStore>();
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto comm = CreateCommunicator(MakeConfig(backend, r, world, store, prefix));
      if (!comm.ok()) {
        ADD_FAILURE() << "rank " << r << ": " << comm.status().ToString();
        return;
      }
      body(**comm, r);
      ++ran;
    });
  }
  for (auto& t : threads) t.join();
  return ran.load();
}

}  // namespace shard::testing
