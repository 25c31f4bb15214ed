// Multi-process FSDP through the real binary: fork/exec `shardd-worker
// --standalone` W times (Gloo over loopback, a FileKvStore rendezvous in a fresh
// temp directory, a unique --run-id per run) and check
//   * equivalence: every strategy at W = 2 and 4 reproduces the W = 1 run's
//     per-step losses and exported weights (up to fp32 summation order);
//   * failure: a SIGKILLed peer or a peer that never starts makes rank 0 exit
//     non-zero with a clear one-line reason, bounded by the configured timeout;
//   * bad input: inconsistent --rank / --world / --rendezvous exit 2 at once.
//
// Every worker runs with one compute thread and one OpenBLAS thread: up to four
// processes share two cores here, and the W = 1 reference then uses the same
// kernels' thread split as the ranks (so only the distribution differs).
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

namespace shard {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> NonEmptyLines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

std::string WorkerBinary() {
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

std::vector<StepLine> ReadMetrics(const std::string& path) {
  std::vector<StepLine> out;
  for (const auto& line : NonEmptyLines(ReadAll(path))) {
    auto j = nlohmann::json::parse(line);
    out.push_back({j.at("step").get<int64_t>(), j.at("loss").get<double>(), j.at("grad_norm").get<double>()});
  }
  return out;
}

std::string Describe(int status) {
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

  static std::string root_;
  int run_counter_ = 0;
};

std::string FsdpProcessTest::root_;

// All tensors of an exported model, by name.
std::map<std::string, std::vector<float>> LoadExport(const std::string& hf_dir) {
  std::map<std::string, std::vector<float>> out;
  auto f = SafetensorsFile::Open(hf_dir + "/model.safetensors");
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return out;
  for (const auto& t : f->tensors()) {
    std::vector<float> v(static_cast<size_t>(t.numel));
    Status st = f->ReadF32(t.name, t.shape, v.data());
    EXPECT_TRUE(st.ok()) << st.ToString();
    out[t.name] = std::move(v);
  }
  return out;
}

// Tolerances of the equivalence test, and why.
//
// Between W = 1 and W = N only the order of the same fp32 sums changes: each
// rank accumulates its own micro-batches and reduce-scatter / all-reduce add
// the ranks' partial gradients, where one rank alone adds every micro-batch in
// turn; the loss sum and the gradient norm are combined across ranks too.
// Step 1's forward pass is bit-identical (same init, same windows).
//
// Losses and gradient norms: --metrics prints 6 significant digits, so the
// files agree to the last digit or differ by one unit (~2e-7 relative for a loss
// of ~6); measured: losses identical, grad norms <= 5e-6 relative. Bounds of
// 2e-5 (loss) and 1e-4 (grad norm, which sums squares of gradients, the least
// well-conditioned figure) leave >=10x margin, while a lost or double-counted
// rank moves the loss by >1e-3 and the norm by >1e-2.
//
// Weights: reordering is NOT uniformly ~1e-7 after AdamW. Adam divides each
// gradient by its own RMS, so an element whose gradient is a near-cancelling
// sum (|g| orders of magnitude below its terms) carries the sum's relative
// rounding error into its update, whose size is ~lr (3e-3): a handful of
// elements move by ~1e-4 while the gradients agree to ~1e-6 overall. Measured
// on this data (tiny model, 4 steps, 870k weights):
//   W=1, 1 micro-batch of 8 instead of 4 of 2 (pure reordering):
//       max |dw| 2.9e-4, max per-tensor rel L2 6.8e-5, 85 elements > 1e-5
//   W=2 / W=4, every strategy: max |dw| <= 1.3e-4, rel L2 <= 3e-5, <= 4 elements > 1e-5
//   for scale, real changes at W=1: lr 1% lower -> rel L2 5e-3, 88% of elements
//       > 1e-5; half the global batch (a lost rank) -> rel L2 0.24, 97% > 1e-5
// So the test bounds
//   * per-tensor relative L2 difference <= 5e-4 (7x the reorder floor, 10x
//     below a 1% lr change);
//   * elements with |dw| > 1e-5: at most 1e-3 of all (floor 1e-4; real changes
//     touch most elements);
//   * max |dw| <= 2e-3 (~lr, 7x the floor): an update with the wrong sign or a
//     misplaced shard element moves an element by ~lr per step.
// The W = 1 reorder run is part of the test: the bounds must accept it, or they
// are tighter than fp32 allows.
constexpr double kLossRelTol = 2e-5;
constexpr double kGradNormRelTol = 1e-4;
constexpr double kTensorRelL2Tol = 5e-4;
constexpr double kOutlierAbs = 1e-5;
constexpr double kOutlierFractionTol = 1e-3;
constexpr double kWeightMaxAbsTol = 2e-3;

struct WeightDiff {
  double max_abs = 0;
  std::string worst;        // element with the largest |dw|
  double max_rel_l2 = 0;    // max over tensors of ||a - b|| / ||a||
  std::string worst_tensor;
  int64_t outliers = 0, total = 0;  // elements with |dw| > kOutlierAbs
};

WeightDiff CompareWeights(const std::map<std::string, std::vector<float>>& a,
                          const std::map<std::string, std::vector<float>>& b) {
  WeightDiff w;
  for (const auto& [name, va] : a) {
    auto it = b.find(name);
    EXPECT_NE(it, b.end()) << "export lacks " << name;
    if (it == b.end()) continue;
    const auto& vb = it->second;
    EXPECT_EQ(va.size(), vb.size()) << name;
    if (va.size() != vb.size()) continue;
    double d2 = 0, a2 = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      const double d = static_cast<double>(va[i]) - vb[i];
      d2 += d * d;
      a2 += static_cast<double>(va[i]) * va[i];
      if (std::abs(d) > kOutlierAbs) ++w.outliers;
      if (std::abs(d) > w.max_abs) {
        w.max_abs = std::abs(d);
        w.worst = name + "[" + std::to_string(i) + "]";
      }
    }
    w.total += static_cast<int64_t>(va.size());
    const double rel = std::sqrt(d2 / std::max(a2, 1e-30));
    if (rel > w.max_rel_l2) {
      w.max_rel_l2 = rel;
      w.worst_tensor = name;
    }
  }
  EXPECT_EQ(a.size(), b.size());
  return w;
}

void ExpectWeightsClose(const std::string& what, const std::string& ref_dir, const std::string& dir) {
  const auto a = LoadExport(ref_dir + "/hf");
  const auto b = LoadExport(dir + "/hf");
  ASSERT_FALSE(a.empty());
  const WeightDiff w = CompareWeights(a, b);
  std::printf("[ measured ] %-28s weights: max |dw| %.3g (%s), max tensor rel L2 %.3g (%s), |dw|>%g: %lld/%lld\n",
              what.c_str(), w.max_abs, w.worst.c_str(), w.max_rel_l2, w.worst_tensor.c_str(), kOutlierAbs,
              static_cast<long long>(w.outliers), static_cast<long long>(w.total));
  EXPECT_LE(w.max_rel_l2, kTensorRelL2Tol) << what << ": tensor " << w.worst_tensor;
  EXPECT_LE(static_cast<double>(w.outliers), kOutlierFractionTol * static_cast<double>(w.total)) << what;
  EXPECT_LE(w.max_abs, kWeightMaxAbsTol) << what << ": element " << w.worst;
}

void ExpectEquivalent(const std::string& what, const std::string& ref_dir, const std::string& dir, int world) {
  const auto ref = ReadMetrics(ref_dir + "/metrics.0.jsonl");
  ASSERT_EQ(ref.size(), 4u);
  double max_loss_rel = 0, max_norm_rel = 0;
  for (int r = 0; r < world; ++r) {
    const auto got = ReadMetrics(dir + "/metrics." + std::to_string(r) + ".jsonl");
    ASSERT_EQ(got.size(), ref.size()) << what << " rank " << r;
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[i].step, ref[i].step);
      const double rel = std::abs(got[i].loss - ref[i].loss) / std::abs(ref[i].loss);
      max_loss_rel = std::max(max_loss_rel, rel);
      const double norm_rel = std::abs(got[i].grad_norm - ref[i].grad_norm) / ref[i].grad_norm;
      max_norm_rel = std::max(max_norm_rel, norm_rel);
      EXPECT_LE(norm_rel, kGradNormRelTol) << what << " rank " << r << " step " << ref[i].step << ": grad norm "
                                           << got[i].grad_norm << " vs W=1 " << ref[i].grad_norm;
      EXPECT_LE(rel, kLossRelTol) << what << " rank " << r << " step " << ref[i].step << ": loss " << got[i].loss
                                  << " vs W=1 " << ref[i].loss;
    }
  }
  // The run must actually train (identical garbage on both sides would pass otherwise).
  EXPECT_NE(ref.front().loss, ref.back().loss);
  std::printf("[ measured ] %-28s loss max rel %.3g, grad_norm max rel %.3g\n", what.c_str(), max_loss_rel,
              max_norm_rel);
  ExpectWeightsClose(what, ref_dir, dir);
}

TEST_F(FsdpProcessTest, EveryStrategyMatchesOneRank) {
  const std::string ref = Train(1, {});
  // The fp32 noise floor: the same W = 1 job accumulating 1 micro-batch of 8
  // instead of 4 of 2. The bounds must accept it (see the tolerance comment).
  ExpectWeightsClose("W=1 micro_batch 8 (reorder)", ref, Train(1, {"train.micro_batch=8"}));
  struct Case {
    std::string strategy;
    int world;
    std::vector<std::string> extra;
  };
  const std::vector<Case> cases = {
      {"full_shard", 2, {}},    {"full_shard", 4, {}},    {"shard_grad_op", 2, {}},
      {"shard_grad_op", 4, {}}, {"no_shard", 2, {}},      {"no_shard", 4, {}},
      {"hybrid_shard", 4, {"parallel.shard_group_size=2"}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> sets = {"parallel.strategy=" + c.strategy};
    sets.insert(sets.end(), c.extra.begin(), c.extra.end());
    const std::string what = c.strategy + " W=" + std::to_string(c.world);
    SCOPED_TRACE(what);
    const std::string dir = Train(c.world, sets);
    if (HasFailure()) return;
    ExpectEquivalent(what, ref, dir, c.world);
  }
}

// Mixed precision across processes (gloo): W = 3 full_shard with bf16 weights
// on the wire and a bf16 gradient reduce-scatter trains like the fp32 job —
// per-step loss within 0.03 (the thread tests state and measure this bound
// over 40 steps: max 0.021) — every rank reports the same loss, and the export
// holds the fp32 masters (same tensors, each within 0.05 of the fp32 run's
// after 4 AdamW steps of lr 3e-3: a rounding-sized difference, not garbage).
TEST_F(FsdpProcessTest, Bf16ProcessesTrackFp32) {
  const std::string ref = Train(3, {"parallel.strategy=full_shard", "train.global_batch=6"});
  const std::string bf = Train(3, {"parallel.strategy=full_shard", "train.global_batch=6", "train.precision=bf16",
                                   "parallel.reduce_dtype=bf16"});
  if (HasFailure()) return;
  const auto a = ReadMetrics(ref + "/metrics.0.jsonl");
  const auto b = ReadMetrics(bf + "/metrics.0.jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), a.size());
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i].loss, a[i].loss, 0.03) << "step " << a[i].step;
    std::printf("step %lld  fp32 %.6f  bf16 %.6f\n", static_cast<long long>(a[i].step), a[i].loss, b[i].loss);
    differs |= b[i].loss != a[i].loss;
  }
  EXPECT_TRUE(differs) << "bf16 and fp32 losses are identical: precision was ignored";
  for (int r = 1; r < 3; ++r) {
    const auto m = ReadMetrics(bf + "/metrics." + std::to_string(r) + ".jsonl");
    ASSERT_EQ(m.size(), b.size());
    for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i].loss, b[i].loss) << "rank " << r << " step " << m[i].step;
  }
  const auto ea = LoadExport(ref + "/hf"), eb = LoadExport(bf + "/hf");
  ASSERT_EQ(ea.size(), eb.size());
  float max_worst = 0;
  for (const auto& [name, va] : ea) {
    auto it = eb.find(name);
    ASSERT_NE(it, eb.end()) << name;
    ASSERT_EQ(it->second.size(), va.size()) << name;
    float worst = 0;
    for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(it->second[i] - va[i]));
    EXPECT_LE(worst, 0.05f) << name;
    max_worst = std::max(max_worst, worst);
  }
  std::printf("exported weights: max |bf16 run - fp32 run| = %.4g\n", max_worst);
}

// Every rank reports the same global loss and gradient norm (they are all-reduced).
TEST_F(FsdpProcessTest, RanksAgreeOnGlobalMetrics) {
  const std::string dir = Train(2, {"parallel.strategy=full_shard"});
  const auto m0 = ReadMetrics(dir + "/metrics.0.jsonl");
  const auto m1 = ReadMetrics(dir + "/metrics.1.jsonl");
  ASSERT_EQ(m0.size(), 4u);
  ASSERT_EQ(m1.size(), m0.size());
  for (size_t i = 0; i < m0.size(); ++i) {
    EXPECT_EQ(m0[i].loss, m1[i].loss) << "step " << m0[i].step;
    EXPECT_EQ(m0[i].grad_norm, m1[i].grad_norm) << "step " << m0[i].step;
  }
}

// SIGKILL rank 1 mid-run: rank 0 must not hang; it exits non-zero within the
// collective timeout (plus start-up slack) naming what failed.
TEST_F(FsdpProcessTest, KilledPeerFailsTheSurvivorPromptly) {
  constexpr double kTimeout = 5;
  const std::string dir = NewRunDir("kill");
  const std::vector<std::string> sets = {"train.steps=100000", "parallel.strategy=full_shard",
                                         "parallel.comm_timeout_s=5"};
  std::vector<Proc> procs;
  ReapOnExit reap(&procs);
  auto t0 = Clock::now();
  for (int r = 0; r < 2; ++r) procs.push_back(Start(dir, Args(dir, r, 2, sets), "rank" + std::to_string(r)));
  const std::string m0 = dir + "/metrics.0.jsonl";
  // Wait until rank 0 finished a few steps, so the kill lands mid-training.
  while (NonEmptyLines(ReadAll(m0)).size() < 3 && Since(t0) < 60) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(NonEmptyLines(ReadAll(m0)).size(), 3u) << "rank 0 made no progress:\n" << ReadAll(procs[0].err);
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
  const std::vector<std::string> sets = {"train.steps=100000", "parallel.strategy=full_shard",
                                         "parallel.comm_timeout_s=5"};
  std::vector<Proc> procs;
  ReapOnExit reap(&procs);
  auto t0 = Clock::now();
  for (int r = 0; r < 2; ++r) procs.push_back(Start(dir, Args(dir, r, 2, sets), "rank" + std::to_string(r)));
  const std::string m0 = dir + "/metrics.0.jsonl";
  while (NonEmptyLines(ReadAll(m0)).size() < 3 && Since(t0) < 60) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(NonEmptyLines(ReadAll(m0)).size(), 3u) << "rank 0 made no progress:\n" << ReadAll(procs[0].err);
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
}  // namespace shard
