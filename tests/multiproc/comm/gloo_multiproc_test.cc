// The gloo backend across real processes: fork W children, each builds its own
// communicator through a FileKvStore in a fresh directory, checks its results and
// reports through its exit code. Failure injection: a peer that never makes the call,
// Abort from another thread, SIGKILL of a rank in the middle of a run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "tests/unit/comm/comm_test_util.h"

namespace shard {
namespace {

using Clock = std::chrono::steady_clock;
using shard::testing::Near;
using shard::testing::Pattern;
using shard::testing::Reduced;
using shard::testing::Value;
namespace fs = std::filesystem;

const CommOptions kOpts{std::chrono::seconds(20)};

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A child's checks: print what failed (with the rank) and exit non-zero.
#define CHILD_CHECK(cond, ...)                                                      \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "[rank %d] %s:%d check failed: %s: ", rank, __FILE__,    \
                   __LINE__, #cond);                                                \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fprintf(stderr, "\n");                                                   \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

struct Child {
  int rank;
  std::shared_ptr<FileKvStore> store;
  std::unique_ptr<Communicator> comm;
};

class GlooProcessesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "shardd-comm-mp-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Forks `world` ranks running `body` (its return value is the exit code) and waits
  // up to `limit` for all of them, killing stragglers. `while_running`, if given, runs
  // in the parent with the children's pids. Returns the raw wait statuses.
  std::vector<int> Fork(int world, const std::function<int(Child&)>& body,
                        std::chrono::seconds limit = std::chrono::seconds(30),
                        const std::function<void(const std::vector<pid_t>&)>& while_running = {}) {
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      std::fflush(nullptr);
      pid_t pid = ::fork();
      if (pid == 0) {
        Child child{r, std::make_shared<FileKvStore>(dir_ + "/store"), nullptr};
        CommConfig c = shard::testing::MakeConfig("gloo", r, world, child.store, "job/a0/world/",
                                                  std::chrono::seconds(20));
        auto comm = CreateCommunicator(c);
        if (!comm.ok()) {
          std::fprintf(stderr, "[rank %d] %s\n", r, comm.status().ToString().c_str());
          ::_exit(100);
        }
        child.comm = std::move(*comm);
        const int code = body(child);
        child.comm.reset();
        std::fflush(nullptr);
        ::_exit(code);
      }
      pids.push_back(pid);
    }
    if (while_running) while_running(pids);
    std::vector<int> statuses(static_cast<size_t>(world), -1);
    const auto deadline = Clock::now() + limit;
    int left = world;
    while (left > 0) {
      for (int r = 0; r < world; ++r) {
        if (statuses[r] != -1) continue;
        int st = 0;
        if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
          statuses[r] = st;
          --left;
        }
      }
      if (left > 0 && Clock::now() > deadline) {
        ADD_FAILURE() << "children still running after " << limit.count() << " s: killing them";
        for (int r = 0; r < world; ++r) {
          if (statuses[r] == -1) ::kill(pids[r], SIGKILL);
        }
        limit = std::chrono::seconds(1 << 20);  // now just reap
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return statuses;
  }

  static void ExpectExitedZero(const std::vector<int>& statuses) {
    for (size_t r = 0; r < statuses.size(); ++r) {
      EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0)
          << "rank " << r << ": " << (WIFEXITED(statuses[r]) ? "exit code " : "signal ")
          << (WIFEXITED(statuses[r]) ? WEXITSTATUS(statuses[r]) : WTERMSIG(statuses[r]));
    }
  }

  std::string dir_;
};

int AllCollectives(Child& ch) {
  const int rank = ch.rank;
  Communicator& c = *ch.comm;
  const int w = c.world_size();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{1000}, int64_t{12345}}) {
    std::vector<float> send = Pattern(rank, n, 1), gathered(static_cast<size_t>(n * w));
    Status st = c.AllGather(send.data(), gathered.data(), n, kOpts);
    CHILD_CHECK(st.ok(), "%s", st.ToString().c_str());
    for (int src = 0; src < w; ++src) {
      for (int64_t i = 0; i < n; ++i) {
        CHILD_CHECK(gathered[src * n + i] == Value(src, i, 1), "AllGather n=%ld", long(n));
      }
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      std::vector<float> big = Pattern(rank, n * w, 2), mine(static_cast<size_t>(n));
      st = c.ReduceScatter(big.data(), mine.data(), n, op, kOpts);
      CHILD_CHECK(st.ok(), "%s", st.ToString().c_str());
      for (int64_t i = 0; i < n; ++i) {
        CHILD_CHECK(Near(mine[i], Reduced(op, w, rank * n + i, 2)), "ReduceScatter %s n=%ld i=%ld",
                    ReduceOpName(op), long(n), long(i));
      }
      std::vector<float> data = Pattern(rank, n, 3);
      st = c.AllReduce(data.data(), n, op, kOpts);
      CHILD_CHECK(st.ok(), "%s", st.ToString().c_str());
      for (int64_t i = 0; i < n; ++i) {
        CHILD_CHECK(Near(data[i], Reduced(op, w, i, 3)), "AllReduce %s n=%ld", ReduceOpName(op), long(n));
      }
    }
    std::vector<double> d(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) d[i] = Value(rank, i, 4) + 1e-9 * rank;
    st = c.AllReduce(d.data(), n, ReduceOp::kSum, kOpts);
    CHILD_CHECK(st.ok(), "%s", st.ToString().c_str());
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int q = 0; q < w; ++q) want += Value(q, i, 4) + 1e-9 * q;
      CHILD_CHECK(std::fabs(d[i] - want) < 1e-12 * want, "AllReduce double n=%ld", long(n));
    }
    for (int root = 0; root < w; ++root) {
      std::vector<float> b = Pattern(rank, n, 10 + root);
      st = c.Broadcast(b.data(), n, root, kOpts);
      CHILD_CHECK(st.ok(), "%s", st.ToString().c_str());
      for (int64_t i = 0; i < n; ++i) CHILD_CHECK(b[i] == Value(root, i, 10 + root), "Broadcast");
    }
    st = c.Barrier(kOpts);
    CHILD_CHECK(st.ok(), "%s", st.ToString().c_str());
  }
  return 0;
}

TEST_F(GlooProcessesTest, AllCollectivesW2) { ExpectExitedZero(Fork(2, AllCollectives)); }
TEST_F(GlooProcessesTest, AllCollectivesW3) { ExpectExitedZero(Fork(3, AllCollectives)); }
TEST_F(GlooProcessesTest, AllCollectivesW4) { ExpectExitedZero(Fork(4, AllCollectives)); }

TEST_F(GlooProcessesTest, LargeBuffersW2) {
  ExpectExitedZero(Fork(2, [](Child& ch) {
    const int rank = ch.rank;
    const int64_t total = int64_t{16} << 20, n = total / 2;
    std::vector<float> send = Pattern(rank, n, 6), all(static_cast<size_t>(total));
    Status st = ch.comm->AllGather(send.data(), all.data(), n, kOpts);
    CHILD_CHECK(st.ok(), "%s", st.ToString().c_str());
    double sum = 0, want = 0;
    for (int src = 0; src < 2; ++src) {
      for (int64_t i = 0; i < n; ++i) {
        sum += all[src * n + i];
        want += Value(src, i, 6);
      }
    }
    CHILD_CHECK(sum == want, "AllGather checksum %f != %f", sum, want);
    CHILD_CHECK(all[total - 1] == Value(1, n - 1, 6), "AllGather last element");
    std::vector<float> grads = Pattern(rank, total, 7), mine(static_cast<size_t>(n));
    st = ch.comm->ReduceScatter(grads.data(), mine.data(), n, ReduceOp::kSum, kOpts);
    CHILD_CHECK(st.ok(), "%s", st.ToString().c_str());
    sum = want = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum += mine[i];
      want += Reduced(ReduceOp::kSum, 2, rank * n + i, 7);
    }
    CHILD_CHECK(sum == want, "ReduceScatter checksum %f != %f", sum, want);
    CHILD_CHECK(mine[n / 3] == Reduced(ReduceOp::kSum, 2, rank * n + n / 3, 7), "spot value");
    return 0;
  }));
}

// Hybrid sharding across processes: shard groups {0,1},{2,3}, replicate groups {0,2},{1,3}.
TEST_F(GlooProcessesTest, SubGroupsW4) {
  ExpectExitedZero(Fork(4, [](Child& ch) {
    const int rank = ch.rank, node = rank / 2, local = rank % 2;
    auto shard = CreateCommunicator(shard::testing::MakeConfig(
        "gloo", local, 2, ch.store, "job/a0/shard" + std::to_string(node) + "/"));
    auto repl = CreateCommunicator(shard::testing::MakeConfig(
        "gloo", node, 2, ch.store, "job/a0/replicate" + std::to_string(local) + "/"));
    CHILD_CHECK(shard.ok() && repl.ok(), "creating sub-groups");
    float x = static_cast<float>(rank + 1);
    CHILD_CHECK((*shard)->AllReduce(&x, 1, ReduceOp::kSum, kOpts).ok(), "shard all-reduce");
    CHILD_CHECK(x == (node == 0 ? 3.f : 7.f), "shard sum %f", x);
    CHILD_CHECK((*repl)->AllReduce(&x, 1, ReduceOp::kSum, kOpts).ok(), "replicate all-reduce");
    CHILD_CHECK(x == 10.f, "replicate sum %f", x);
    float y = 1;
    CHILD_CHECK(ch.comm->AllReduce(&y, 1, ReduceOp::kSum, kOpts).ok() && y == 4.f, "world");
    return 0;
  }));
}

TEST_F(GlooProcessesTest, TimeoutWhenAPeerNeverArrives) {
  ExpectExitedZero(Fork(2, [](Child& ch) {
    const int rank = ch.rank;
    if (rank == 1) {
      // Stay connected (and out of the call) until rank 0 has given up.
      auto done = ch.store->Get("rank0-done", std::chrono::seconds(10));
      CHILD_CHECK(done.ok(), "%s", done.status().ToString().c_str());
      return 0;
    }
    std::vector<float> data(1000, 1.f);
    const auto start = Clock::now();
    Status st = ch.comm->AllReduce(data.data(), 1000, ReduceOp::kSum, CommOptions{std::chrono::seconds(1)});
    const double secs = Since(start);
    (void)ch.store->Set("rank0-done", "1");
    std::fprintf(stderr, "[rank 0] after %.2f s: %s\n", secs, st.ToString().c_str());
    CHILD_CHECK(st.code() == StatusCode::kDeadlineExceeded, "%s", st.ToString().c_str());
    CHILD_CHECK(st.message().find("1000 ms") != std::string::npos, "%s", st.ToString().c_str());
    CHILD_CHECK(secs >= 0.9 && secs <= 3.0, "took %.2f s", secs);
    return 0;
  }));
}

TEST_F(GlooProcessesTest, AbortFromAnotherThreadUnblocksTheCall) {
  ExpectExitedZero(Fork(2, [](Child& ch) {
    const int rank = ch.rank;
    if (rank == 1) {
      auto aborted = ch.store->Get("rank0-aborted", std::chrono::seconds(10));
      CHILD_CHECK(aborted.ok(), "%s", aborted.status().ToString().c_str());
      // Rank 0 closed its connections: our next call fails promptly, naming the cause.
      const auto start = Clock::now();
      Status st = ch.comm->Barrier(CommOptions{std::chrono::seconds(15)});
      std::fprintf(stderr, "[rank 1] after %.2f s: %s\n", Since(start), st.ToString().c_str());
      CHILD_CHECK(!st.ok() && Since(start) < 5.0, "%s", st.ToString().c_str());
      return 0;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ch.comm->Abort("operator cancelled the job");
    });
    std::vector<float> send(4096, 1.f), recv(8192);
    const auto start = Clock::now();
    Status st = ch.comm->AllGather(send.data(), recv.data(), 4096, CommOptions{std::chrono::seconds(30)});
    const double secs = Since(start);
    aborter.join();
    (void)ch.store->Set("rank0-aborted", "1");
    CHILD_CHECK(st.code() == StatusCode::kAborted, "%s", st.ToString().c_str());
    CHILD_CHECK(st.message().find("operator cancelled the job") != std::string::npos, "%s",
                st.ToString().c_str());
    CHILD_CHECK(secs < 1.5, "abort took %.2f s", secs);
    return 0;
  }));
}

// SIGKILL one rank while all are busy: the survivors' calls fail with a clear error
// within seconds (long before their 20 s timeout), and nobody hangs.
TEST_F(GlooProcessesTest, SigkillOfARankFailsTheSurvivorsPromptly) {
  const int kWorld = 3, kVictim = 1;
  const auto statuses = Fork(
      kWorld,
      [](Child& ch) {
        const int rank = ch.rank;
        std::vector<float> grads = Pattern(rank, 3 * 200000), mine(200000);
        (void)ch.store->Add("ready", 1);
        const auto start = Clock::now();
        while (Since(start) < 15.0) {
          const auto call = Clock::now();
          Status st = ch.comm->ReduceScatter(grads.data(), mine.data(), 200000, ReduceOp::kSum, kOpts);
          if (st.ok()) st = ch.comm->AllReduce(mine.data(), 1000, ReduceOp::kMax, kOpts);
          if (!st.ok()) {
            std::fprintf(stderr, "[rank %d] failed after %.2f s in the call: %s\n", rank, Since(call),
                         st.ToString().c_str());
            CHILD_CHECK(st.code() == StatusCode::kUnavailable, "%s", st.ToString().c_str());
            CHILD_CHECK(st.message().find("rank " + std::to_string(rank)) != std::string::npos, "%s",
                        st.ToString().c_str());
            CHILD_CHECK(Since(call) < 5.0, "failure took %.2f s", Since(call));
            return 0;
          }
        }
        CHILD_CHECK(false, "no failure seen in 15 s");
        return 1;
      },
      std::chrono::seconds(30),
      [&](const std::vector<pid_t>& pids) {
        FileKvStore store(dir_ + "/store");
        for (int i = 0; i < 2000 && *store.Add("ready", 0) < kWorld; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // mid-run
        ::kill(pids[kVictim], SIGKILL);
      });
  ASSERT_TRUE(WIFSIGNALED(statuses[kVictim]) && WTERMSIG(statuses[kVictim]) == SIGKILL);
  std::vector<int> survivors;
  for (int r = 0; r < kWorld; ++r) {
    if (r != kVictim) survivors.push_back(statuses[r]);
  }
  ExpectExitedZero(survivors);  // a survivor killed by SIGPIPE would show up here
}

}  // namespace
}  // namespace shard
