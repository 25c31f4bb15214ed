// Multi-process FSDP training throughput on the CPU backend, and the Gloo
// communicator's collective bandwidth.
//
// W = 2 ranks in 2 forked processes, one compute thread and one OpenBLAS thread
// each (one rank per core), Gloo over loopback, rendezvous through a FileKvStore
// in a temp dir. Model: preset "bench" (d=256, 4 layers, 8 heads, 4 KV heads,
// ffn 688, vocab 4096), seq 256, micro-batch 8, global batch 16 (one micro-batch
// per rank per step). For each strategy: tokens/s, model GFLOP/s (6N + 12*L*d*T
// per token, N without the input embedding), the communication time per step
// the compute thread waited for (FsdpRuntime::comm_wait_seconds(): what overlap
// did not hide of the queued all-gathers and reduce-scatters; it does not count
// the synchronous replica all-reduce, gradient-norm and loss all-reduces), and
// the step time minus a compute-only run of the same per-rank work (every
// communication and synchronisation cost that is not hidden), and the CPU time
// a rank's process used per step (all its threads; max over ranks): on a
// machine shared with other jobs wall times inflate, CPU time much less. The
// configurations are stepped in turn, so load from other processes on a shared
// machine hits them alike. Then all-gather / reduce-scatter bus bandwidth for
// 1-64 MB buffers (nccl-tests convention: size = the full gathered / reduced
// buffer, algbw = size / time, busbw = algbw * (W-1)/W).
//
// usage: fsdp_bench [steps=6] [configs=local,full_shard,shard_grad_op,no_shard]
//        fsdp_bench --smoke   (1 step of full_shard, 1 MB collectives: that it starts and prints its figures)
//   (local = the compute-only baseline; list it first for the "- compute-only" column)
// Prints figures; never fails on speed.
#include <cblas.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shard/comm/communicator.h"
#include "shard/common/kv_stores.h"
#include "shard/common/logging.h"
#include "shard/common/thread_pool.h"
#include "shard/train/trainer.h"

namespace {

constexpr int kWorld = 2;
constexpr int kSeq = 256;
constexpr int kMicro = 8;
constexpr int kGlobal = kMicro * kWorld;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU seconds (user + system, all threads) this process has used.
double ProcessCpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// Minor page faults of this process so far: fresh pages the kernel had to map
// and zero (a sign of buffers allocated and freed every step).
double ProcessMinorFaults() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_minflt);
}

#define BENCH_CHECK(expr)                                                                       \
  do {                                                                                          \
    shard::Status _st = (expr);                                                                 \
    if (!_st.ok()) {                                                                            \
      std::fprintf(stderr, "fsdp_bench rank %d: %s: %s\n", rank, #expr, _st.ToString().c_str()); \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)

// Max over ranks of a per-rank figure (every rank must call it).
double MaxOverRanks(shard::Communicator& c, double x) {
  (void)c.AllReduce(&x, 1, shard::ReduceOp::kMax, shard::CommOptions{});
  return x;
}

// One configuration under test: its trainer and per-step figures.
struct Config {
  std::string name;
  std::unique_ptr<shard::Trainer> trainer;
  std::vector<double> step_s, wait_s, cpu_s, faults;  // max over ranks, per timed step
};

// name "local": every process trains its own W=1 job with the same per-rank
// work (one micro-batch of 8) at the same time, with no communicator: the
// compute-only step time the W=2 runs are compared with.
int MakeConfig(int rank, const std::string& name, const std::string& tokens,
               const std::shared_ptr<shard::KvStore>& store, Config* out) {
  const bool local = name == "local";
  const int world = local ? 1 : kWorld;
  std::string yaml = "name: fsdp-bench\nmodel: {preset: bench}\ndata: {tokens: " + tokens +
                     ", seq_len: " + std::to_string(kSeq) + "}\ntrain: {steps: 100000, global_batch: " +
                     std::to_string(kMicro * world) + ", micro_batch: " + std::to_string(kMicro) +
                     ", lr: 1.0e-4, log_every: 100000}\nparallel: {strategy: " +
                     (local ? std::string("no_shard") : name) + ", world_size: " + std::to_string(world) +
                     "}\nresources: {device: cpu}\n";
  auto job = shard::ParseJobConfig(yaml, "fsdp_bench.yaml");
  BENCH_CHECK(job.status());
  shard::DistContext dist;
  dist.rank = local ? 0 : rank;
  dist.world = world;
  dist.comm_backend = "gloo";
  dist.store = store;
  dist.prefix = "bench/" + name + "/";
  auto trainer = shard::Trainer::Create(*job, dist);
  BENCH_CHECK(trainer.status());
  out->name = name;
  out->trainer = std::move(*trainer);
  for (int i = 0; i < 2; ++i) BENCH_CHECK(out->trainer->Step().status());  // allocations, prefetch order
  return 0;
}

// Experiment knob (env FSDP_BENCH_HELPER_NICE=N, e.g. -10; negative needs
// root): gives every thread of this process except the compute thread (the
// FSDP communication threads, Gloo's transport loops) nice level N, so on a
// machine with one core per rank they preempt compute as soon as data arrives
// instead of waiting for a time slice. Shows how much of the exposed
// communication is scheduling latency rather than bandwidth.
void MaybeRaiseHelperThreads(int rank) {
  const char* v = std::getenv("FSDP_BENCH_HELPER_NICE");
  if (!v) return;
  const int nice = std::atoi(v);
  const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    const pid_t tid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
    if (tid == self) continue;
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) == 0) ++n;
  }
  if (rank == 0) std::printf("  (helper threads: %d set to nice %d)\n", n, nice);
}

// Steps every configuration in turn, `steps` rounds, so a load change on the
// (shared) machine hits every configuration alike.
int Train(int rank, int steps, const std::vector<std::string>& names, const std::string& tokens,
          const std::shared_ptr<shard::KvStore>& store, shard::Communicator& sync) {
  std::vector<Config> configs(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    if (int rc = MakeConfig(rank, names[i], tokens, store, &configs[i])) return rc;
  }
  MaybeRaiseHelperThreads(rank);
  for (int s = 0; s < steps; ++s) {
    for (auto& c : configs) {
      BENCH_CHECK(sync.Barrier(shard::CommOptions{}));
      const double w0 = c.trainer->runtime().comm_wait_seconds();
      const double cpu0 = ProcessCpuSeconds(), f0 = ProcessMinorFaults();
      auto t0 = Clock::now();
      BENCH_CHECK(c.trainer->Step().status());
      const double wall = Since(t0);
      c.cpu_s.push_back(MaxOverRanks(sync, ProcessCpuSeconds() - cpu0));
      c.faults.push_back(MaxOverRanks(sync, ProcessMinorFaults() - f0));
      c.step_s.push_back(MaxOverRanks(sync, wall));
      c.wait_s.push_back(MaxOverRanks(sync, c.trainer->runtime().comm_wait_seconds() - w0));
    }
  }
  if (rank != 0) return 0;
  const auto& mc = configs.front().trainer->model_config();
  // Tokens per step over both processes (the local baseline runs two W=1 jobs).
  const double tok = static_cast<double>(kGlobal) * kSeq;
  const double flops = mc.TrainFlopsPerToken(kSeq);
  double local_s = 0;
  for (const auto& c : configs) {
    std::vector<double> sorted = c.step_s;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0, wait = 0, cpu = 0, faults = 0;
    for (int i = 0; i < steps; ++i) {
      mean += c.step_s[i] / steps;
      wait += c.wait_s[i] / steps;
      cpu += c.cpu_s[i] / steps;
      faults += c.faults[i] / steps;
    }
    const double median = sorted[sorted.size() / 2], best = sorted.front();
    std::printf("  %-14s step %7.1f ms (median %7.1f, best %7.1f)  tokens/s %7.0f (median %7.0f)  GFLOP/s %6.1f",
                c.name == "local" ? "compute-only" : c.name.c_str(), mean * 1e3, median * 1e3, best * 1e3,
                tok / mean, tok / median, tok * flops / mean / 1e9);
    std::printf("  cpu/step %7.1f ms  page faults/step %6.0f", cpu * 1e3, faults);
    if (c.name == "local") {
      local_s = median;
      std::printf("  (2 independent W=1 jobs, no communication)\n");
    } else {
      std::printf("  comm wait/step %6.1f ms (%4.1f%%)", wait * 1e3, 100 * wait / mean);
      if (local_s > 0) std::printf("  median - compute-only %+7.1f ms", (median - local_s) * 1e3);
      std::printf("\n");
    }
  }
  std::fflush(stdout);
  return 0;
}

// --smoke: only the 1 MB buffers.
bool g_smoke = false;

int Bandwidth(int rank, shard::Communicator& c) {
  if (rank == 0) {
    std::printf("\ngloo communicator, W=%d over loopback (busbw = algbw*(W-1)/W; size = full buffer)\n", kWorld);
    std::printf("  %8s  %28s  %28s\n", "size", "all-gather algbw / busbw", "reduce-scatter algbw / busbw");
  }
  const shard::CommOptions opts{};
  for (int mb : {1, 4, 16, 64}) {
    if (g_smoke && mb > 1) break;
    const int64_t total = static_cast<int64_t>(mb) * (1 << 20) / 4;  // floats in the full buffer
    const int64_t per = total / kWorld;
    std::vector<float> full(static_cast<size_t>(total), 1.0f + rank), part(static_cast<size_t>(per), 2.0f);
    const int iters = mb >= 16 ? 5 : 20;
    double secs[2];
    for (int op = 0; op < 2; ++op) {
      auto run = [&]() -> shard::Status {
        return op == 0 ? c.AllGather(part.data(), full.data(), per, opts)
                       : c.ReduceScatter(full.data(), part.data(), per, shard::ReduceOp::kSum, opts);
      };
      BENCH_CHECK(run());  // warm-up
      BENCH_CHECK(c.Barrier(opts));
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) BENCH_CHECK(run());
      secs[op] = MaxOverRanks(c, Since(t0) / iters);
    }
    if (rank == 0) {
      const double bytes = static_cast<double>(total) * 4;
      const double f = static_cast<double>(kWorld - 1) / kWorld;
      std::printf("  %5d MB  %11.2f / %6.2f GB/s  %19.2f / %6.2f GB/s\n", mb, bytes / secs[0] / 1e9,
                  bytes / secs[0] / 1e9 * f, bytes / secs[1] / 1e9, bytes / secs[1] / 1e9 * f);
      std::fflush(stdout);
    }
  }
  return 0;
}

int RankMain(int rank, int steps, const std::vector<std::string>& strategies, const std::string& dir) {
  // One thread per rank: set before anything creates the compute pool.
  ::setenv("SHARDD_NUM_THREADS", "1", 1);
  shard::SetNumComputeThreads(1);
  openblas_set_num_threads(1);
  shard::InitLogging("warn");
  auto store = std::make_shared<shard::FileKvStore>(dir + "/store");
  shard::CommConfig cc;
  cc.backend = "gloo";
  cc.rank = rank;
  cc.world_size = kWorld;
  cc.store = store;
  cc.prefix = "bench/sync/";
  auto sync = shard::CreateCommunicator(cc);
  BENCH_CHECK(sync.status());
  if (rank == 0) {
    auto cfg = shard::LlamaPreset("bench");
    std::printf("fsdp_bench: W=%d processes x 1 thread, model bench (N=%.2fM matmul params, L=%d, d=%lld), "
                "seq %d, micro-batch %d, global batch %d, %d timed steps each, configurations interleaved step by step "
                "(step time = max over ranks)\n",
                kWorld, cfg->NumMatmulParams() / 1e6, cfg->num_layers, static_cast<long long>(cfg->hidden_size),
                kSeq, kMicro, kGlobal, steps);
    std::fflush(stdout);
  }
  if (int rc = Train(rank, steps, strategies, dir + "/tokens.u32", store, **sync)) return rc;
  return Bandwidth(rank, **sync);
}

}  // namespace

int main(int argc, char** argv) {
  g_smoke = argc > 1 && std::string(argv[1]) == "--smoke";
  const int steps = g_smoke ? 1 : argc > 1 ? std::atoi(argv[1]) : 6;
  std::vector<std::string> strategies = {"local", "full_shard", "shard_grad_op", "no_shard"};
  if (g_smoke) strategies = {"full_shard"};
  if (steps < 1) {
    std::fprintf(stderr, "usage: fsdp_bench [steps=6] [configs=...] | --smoke\n");
    return 2;
  }
  if (!g_smoke && argc > 2) {
    strategies.clear();
    std::stringstream ss(argv[2]);
    for (std::string s; std::getline(ss, s, ',');) strategies.push_back(s);
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "shardd-fsdp-bench-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  {
    std::mt19937 rng(1);
    std::vector<uint32_t> t(400000);
    for (auto& x : t) x = rng() % 4096;
    std::ofstream(dir + "/tokens.u32", std::ios::binary)
        .write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size() * 4));
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      const int rc = RankMain(r, steps, strategies, dir);
      std::fflush(nullptr);
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  std::filesystem::remove_all(dir);
  return rc;
}
