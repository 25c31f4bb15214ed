// The conformance suite: every backend × world size 1..4, ranks as threads. Each case
// checks results element by element against a reference computed here.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "tests/unit/comm/comm_test_util.h"

namespace shard {
namespace {

using shard::testing::Near;
using shard::testing::Pattern;
using shard::testing::Reduced;
using shard::testing::RunRanks;
using shard::testing::Value;

const int64_t kCounts[] = {0, 1, 3, 1000, 12345};
const CommOptions kOpts{std::chrono::seconds(20)};

struct Param {
  std::string backend;
  int world;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.backend << " W=" << p.world; }

class ConformanceTest : public ::testing::TestWithParam<Param> {
 protected:
  const std::string& backend() const { return GetParam().backend; }
  int world() const { return GetParam().world; }
  void Run(const std::function<void(Communicator&, int)>& body) {
    ASSERT_EQ(RunRanks(backend(), world(), body), world());
  }
};

TEST_P(ConformanceTest, ReportsRankWorldAndName) {
  Run([&](Communicator& c, int r) {
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.world_size(), world());
    EXPECT_NE(c.name().find(backend()), std::string::npos) << c.name();
  });
}

TEST_P(ConformanceTest, AllGather) {
  Run([&](Communicator& c, int r) {
    for (int64_t n : kCounts) {
      std::vector<float> send = Pattern(r, n, 1);
      std::vector<float> recv(static_cast<size_t>(n * world()), -1.f);
      ASSERT_OK(c.AllGather(send.data(), recv.data(), n, kOpts)) << n;
      for (int src = 0; src < world(); ++src) {
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(recv[src * n + i], Value(src, i, 1)) << "n=" << n << " src=" << src;
        }
      }
    }
  });
}

TEST_P(ConformanceTest, AllGatherInPlace) {
  Run([&](Communicator& c, int r) {
    const int64_t n = 1001;
    std::vector<float> buf(static_cast<size_t>(n * world()), -1.f);
    std::vector<float> mine = Pattern(r, n);
    std::copy(mine.begin(), mine.end(), buf.begin() + r * n);
    ASSERT_OK(c.AllGather(buf.data() + r * n, buf.data(), n, kOpts));
    for (int src = 0; src < world(); ++src) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(buf[src * n + i], Value(src, i));
    }
  });
}

TEST_P(ConformanceTest, ReduceScatter) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    Run([&](Communicator& c, int r) {
      for (int64_t n : kCounts) {
        std::vector<float> send = Pattern(r, n * world(), 2);
        std::vector<float> recv(static_cast<size_t>(n), -1.f);
        ASSERT_OK(c.ReduceScatter(send.data(), recv.data(), n, op, kOpts));
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(Near(recv[i], Reduced(op, world(), r * n + i, 2)))
              << ReduceOpName(op) << " n=" << n << " i=" << i << " got " << recv[i];
        }
      }
    });
  }
}

TEST_P(ConformanceTest, ReduceScatterInPlace) {
  Run([&](Communicator& c, int r) {
    const int64_t n = 777;
    std::vector<float> buf = Pattern(r, n * world());
    float* mine = buf.data() + r * n;
    ASSERT_OK(c.ReduceScatter(buf.data(), mine, n, ReduceOp::kSum, kOpts));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(mine[i], Reduced(ReduceOp::kSum, world(), r * n + i));
  });
}

TEST_P(ConformanceTest, AllReduceFloat) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    Run([&](Communicator& c, int r) {
      for (int64_t n : kCounts) {
        std::vector<float> data = Pattern(r, n, 3);
        ASSERT_OK(c.AllReduce(data.data(), n, op, kOpts));
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(Near(data[i], Reduced(op, world(), i, 3)))
              << ReduceOpName(op) << " n=" << n << " i=" << i << " got " << data[i];
        }
      }
    });
  }
}

TEST_P(ConformanceTest, AllReduceDouble) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    Run([&](Communicator& c, int r) {
      for (int64_t n : kCounts) {
        std::vector<double> data(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) data[i] = Value(r, i, 4) + 1e-9 * r;
        ASSERT_OK(c.AllReduce(data.data(), n, op, kOpts));
        for (int64_t i = 0; i < n; ++i) {
          double want = 0;
          for (int q = 0; q < world(); ++q) {
            const double v = Value(q, i, 4) + 1e-9 * q;
            want = (op == ReduceOp::kMax) ? (q == 0 ? v : std::max(want, v)) : want + v;
          }
          if (op == ReduceOp::kAvg) want /= world();
          // Double keeps the 1e-9 terms a float reduction would lose.
          ASSERT_NEAR(data[i], want, 1e-12 * std::max(1.0, std::fabs(want)))
              << ReduceOpName(op) << " n=" << n << " i=" << i;
        }
      }
    });
  }
}

TEST_P(ConformanceTest, AllReduceResultsAreIdenticalOnEveryRank) {
  std::vector<std::vector<float>> results(static_cast<size_t>(world()));
  Run([&](Communicator& c, int r) {
    std::vector<float> data(5000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = 0.1f * static_cast<float>(i % 13) + 0.01f * r;
    ASSERT_OK(c.AllReduce(data.data(), static_cast<int64_t>(data.size()), ReduceOp::kAvg, kOpts));
    results[static_cast<size_t>(r)] = data;
  });
  for (int r = 1; r < world(); ++r) {
    ASSERT_EQ(std::memcmp(results[0].data(), results[r].data(), results[0].size() * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
  }
}

TEST_P(ConformanceTest, BroadcastFromEachRoot) {
  Run([&](Communicator& c, int r) {
    for (int root = 0; root < world(); ++root) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{12345}}) {
        std::vector<float> data = Pattern(r, n, 5 + root);
        ASSERT_OK(c.Broadcast(data.data(), n, root, kOpts));
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(data[i], Value(root, i, 5 + root)) << "root=" << root << " n=" << n;
        }
      }
    }
  });
}

TEST_P(ConformanceTest, BarrierOrdersAllRanks) {
  std::vector<std::atomic<int>> before(static_cast<size_t>(world()));
  Run([&](Communicator& c, int r) {
    for (int round = 1; round <= 5; ++round) {
      // Stagger arrivals so a barrier that did not wait would be caught.
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * ((r + round) % world())));
      before[static_cast<size_t>(r)] = round;
      ASSERT_OK(c.Barrier(kOpts));
      for (int q = 0; q < world(); ++q) {
        EXPECT_GE(before[static_cast<size_t>(q)].load(), round) << "rank " << q;
      }
      ASSERT_OK(c.Barrier(kOpts));  // nobody starts the next round early
    }
  });
}

TEST_P(ConformanceTest, MixedSequenceOfCollectives) {
  Run([&](Communicator& c, int r) {
    for (int it = 0; it < 30; ++it) {
      const int64_t n = 1 + (it * 37) % 500;
      switch (it % 4) {
        case 0: {
          std::vector<float> send = Pattern(r, n, it), recv(static_cast<size_t>(n * world()));
          ASSERT_OK(c.AllGather(send.data(), recv.data(), n, kOpts));
          ASSERT_EQ(recv[static_cast<size_t>((world() - 1) * n + n - 1)], Value(world() - 1, n - 1, it));
          break;
        }
        case 1: {
          std::vector<float> send = Pattern(r, n * world(), it), recv(static_cast<size_t>(n));
          ASSERT_OK(c.ReduceScatter(send.data(), recv.data(), n, ReduceOp::kSum, kOpts));
          ASSERT_EQ(recv[0], Reduced(ReduceOp::kSum, world(), r * n, it));
          break;
        }
        case 2: {
          std::vector<float> data = Pattern(r, n, it);
          ASSERT_OK(c.AllReduce(data.data(), n, ReduceOp::kMax, kOpts));
          ASSERT_EQ(data[static_cast<size_t>(n - 1)], Reduced(ReduceOp::kMax, world(), n - 1, it));
          break;
        }
        default: {
          std::vector<float> data = Pattern(r, n, it);
          ASSERT_OK(c.Broadcast(data.data(), n, it % world(), kOpts));
          ASSERT_EQ(data[0], Value(it % world(), 0, it));
          ASSERT_OK(c.Barrier(kOpts));
        }
      }
    }
  });
}

// 16M floats in total per call: catches segment bookkeeping errors that only show
// once a block spans many 1 MiB segments. Checked element by element plus a checksum.
TEST_P(ConformanceTest, LargeBuffers) {
  const int64_t n = (int64_t{16} << 20) / world();
  const int64_t total = n * world();
  Run([&](Communicator& c, int r) {
    {
      std::vector<float> send = Pattern(r, n, 6), recv(static_cast<size_t>(total), -1.f);
      ASSERT_OK(c.AllGather(send.data(), recv.data(), n, kOpts));
      double sum = 0, want_sum = 0;
      int64_t bad = 0;
      for (int src = 0; src < world(); ++src) {
        for (int64_t i = 0; i < n; ++i) {
          const float got = recv[static_cast<size_t>(src * n + i)];
          const float want = Value(src, i, 6);
          bad += got != want;
          sum += got;
          want_sum += want;
        }
      }
      EXPECT_EQ(bad, 0);
      EXPECT_EQ(sum, want_sum);
      EXPECT_EQ(recv[static_cast<size_t>(total - 1)], Value(world() - 1, n - 1, 6));
    }
    {
      std::vector<float> send = Pattern(r, total, 7), recv(static_cast<size_t>(n), -1.f);
      ASSERT_OK(c.ReduceScatter(send.data(), recv.data(), n, ReduceOp::kSum, kOpts));
      double sum = 0, want_sum = 0;
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = Reduced(ReduceOp::kSum, world(), r * n + i, 7);
        bad += recv[static_cast<size_t>(i)] != want;
        sum += recv[static_cast<size_t>(i)];
        want_sum += want;
      }
      EXPECT_EQ(bad, 0);
      EXPECT_EQ(sum, want_sum);
      EXPECT_EQ(recv[static_cast<size_t>(n / 2)], Reduced(ReduceOp::kSum, world(), r * n + n / 2, 7));
    }
  });
}

// Only rank 0 makes the call: it must give up after its timeout, not hang.
TEST_P(ConformanceTest, TimeoutWhenAPeerNeverArrives) {
  if (world() < 2) GTEST_SKIP() << "needs a peer";
  std::atomic<bool> done{false};
  Run([&](Communicator& c, int r) {
    if (r == 0) {
      std::vector<float> data(100, 1.f);
      const auto start = std::chrono::steady_clock::now();
      Status st = c.AllReduce(data.data(), 100, ReduceOp::kSum, CommOptions{std::chrono::seconds(1)});
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
      EXPECT_NE(st.message().find("AllReduce"), std::string::npos) << st.ToString();
      EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.ToString();
      EXPECT_NE(st.message().find("1000 ms"), std::string::npos) << st.ToString();
      EXPECT_GE(secs, 0.9);
      EXPECT_LE(secs, 3.0);
      // The communicator is unusable afterwards, and says so at once.
      Status again = c.Barrier(kOpts);
      EXPECT_FALSE(again.ok());
      done = true;
    } else {
      // Stay alive (a departing peer would fail rank 0 differently) until rank 0 is done.
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      // Then our own calls fail promptly too: the group is broken.
      const auto start = std::chrono::steady_clock::now();
      Status st = c.Barrier(CommOptions{std::chrono::seconds(10)});
      EXPECT_FALSE(st.ok());
      EXPECT_LE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0)
          << st.ToString();
    }
  });
}

// Abort from another thread wakes a call blocked on a peer that never comes, for each
// kind of collective; the peer's later calls fail too instead of hanging.
TEST_P(ConformanceTest, AbortUnblocksAWaitingCall) {
  if (world() < 2) GTEST_SKIP() << "needs a peer";
  for (int kind = 0; kind < 5; ++kind) {
    std::atomic<bool> done{false};
    Run([&](Communicator& c, int r) {
      if (r != 0) {
        while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        Status st = c.Barrier(CommOptions{std::chrono::seconds(10)});
        EXPECT_FALSE(st.ok()) << "kind " << kind;
        return;
      }
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        c.Abort("test abort");
      });
      const int64_t n = 3000;
      std::vector<float> a(static_cast<size_t>(n * world()), 1.f), b(static_cast<size_t>(n * world()));
      const CommOptions long_wait{std::chrono::seconds(30)};
      const auto start = std::chrono::steady_clock::now();
      Status st;
      switch (kind) {
        case 0: st = c.AllGather(a.data(), b.data(), n, long_wait); break;
        case 1: st = c.ReduceScatter(a.data(), b.data(), n, ReduceOp::kSum, long_wait); break;
        case 2: st = c.AllReduce(a.data(), n, ReduceOp::kSum, long_wait); break;
        case 3: st = c.Broadcast(a.data(), n, 1, long_wait); break;
        default: st = c.Barrier(long_wait);
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      aborter.join();
      EXPECT_EQ(st.code(), StatusCode::kAborted) << "kind " << kind << ": " << st.ToString();
      EXPECT_NE(st.message().find("test abort"), std::string::npos) << st.ToString();
      EXPECT_LE(secs, 1.5) << "kind " << kind;
      // Every later call is refused with ABORTED, at once.
      EXPECT_EQ(c.Barrier(kOpts).code(), StatusCode::kAborted);
      EXPECT_EQ(c.AllReduce(a.data(), 0, ReduceOp::kSum, kOpts).code(), StatusCode::kAborted);
      done = true;
    });
  }
}

TEST_P(ConformanceTest, RejectsBadArguments) {
  Run([&](Communicator& c, int r) {
    float x = 0;
    EXPECT_EQ(c.AllReduce(&x, -1, ReduceOp::kSum, kOpts).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.AllGather(nullptr, &x, 1, kOpts).code(), StatusCode::kInvalidArgument);
    Status st = c.Broadcast(&x, 1, world(), kOpts);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("root"), std::string::npos) << st.ToString();
    // Still usable afterwards: argument errors are caught before any communication.
    EXPECT_TRUE(c.Barrier(kOpts).ok());
  });
}

std::vector<Param> AllParams() {
  std::vector<Param> out;
  for (const char* backend : {"local", "gloo"}) {
    for (int w = 1; w <= 4; ++w) out.push_back({backend, w});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceTest, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.backend + "_W" + std::to_string(info.param.world);
                         });

}  // namespace
}  // namespace shard
