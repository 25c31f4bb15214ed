// Context parallelism (parallel.context_parallel C) against C = 1: per-rank
// peak device memory and tokens/s at a few thousand tokens per sequence, on
// W = 4 CPU ranks as threads (local communicator), model preset "bench"
// (d=256, 4 layers, 8 heads / 4 KV heads, vocab 4096), micro-batch 1.
// C = 1: four data ranks, each a whole sequence per step; C = 2: two groups
// of two; C = 4: one sequence split over all four. The ranks share the
// machine's cores, so tokens/s is the four ranks' joint throughput.
//
// Memory: every rank's backend is wrapped by the profiler, which counts
// device allocations (ProfilePeakBytes). "state" is the rank's sharded
// parameters, gradients and AdamW moments (the same at every C: FSDP shards
// over all four ranks); "peak - state" is what the step adds: activations,
// the gathered units, the logits chunk and, under CP, one layer's K/V
// gathered at the whole length.
//
// usage: cp_bench [--smoke] [seq=4096] [steps=3]   Prints figures; never fails on speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shard/backend/profiling_backend.h"
#include "shard/common/logging.h"
#include "shard/train/trainer.h"

namespace {

constexpr int kWorld = 4;

struct Figures {
  double tokens_per_s = 0;
  int64_t peak = 0;   // max over ranks
  int64_t state = 0;  // rank 0's sharded state
};

bool RunC(const std::string& tokens, int c, int seq, int steps, Figures* f) {
  const int gb = kWorld / c;  // one sequence per data rank
  const std::string yaml = "name: cp-bench\nmodel: {preset: bench}\ndata: {tokens: " + tokens +
                           ", seq_len: " + std::to_string(seq) + "}\ntrain: {steps: 100000, global_batch: " +
                           std::to_string(gb) + ", micro_batch: 1, lr: 1.0e-4, log_every: 1000000}\n"
                           "parallel: {world_size: " + std::to_string(kWorld) + ", context_parallel: " +
                           std::to_string(c) + "}\nresources: {device: cpu}\n";
  auto job = shard::ParseJobConfig(yaml, "cp_bench.yaml");
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
    return false;
  }
  static int call = 0;
  const std::string prefix = "cp-bench-" + std::to_string(call++) + "/";
  std::vector<double> step_s(steps, 0.0);
  std::vector<int64_t> peaks(kWorld, 0);
  std::mutex mu;
  bool ok = true;
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      shard::DistContext d;
      d.rank = r;
      d.world = kWorld;
      d.comm_backend = "local";
      d.prefix = prefix;
      d.make_backend = []() -> shard::StatusOr<std::unique_ptr<shard::Backend>> {
        ASSIGN_OR_RETURN(auto cpu, shard::CreateBackend("cpu"));
        return shard::WrapWithProfiler(std::move(cpu), nullptr);
      };
      auto t = shard::Trainer::Create(*job, d);
      if (!t.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        std::fprintf(stderr, "rank %d: %s\n", r, t.status().ToString().c_str());
        ok = false;
        return;
      }
      for (int s = 0; s <= steps; ++s) {  // step 0 of these: warm-up
        const auto t0 = std::chrono::steady_clock::now();
        auto m = (*t)->Step();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(mu);
        if (!m.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", r, m.status().ToString().c_str());
          ok = false;
          return;
        }
        if (s > 0) step_s[s - 1] = std::max(step_s[s - 1], secs);
      }
      std::lock_guard<std::mutex> lock(mu);
      peaks[r] = shard::ProfilePeakBytes((*t)->backend());
      if (r == 0) {
        auto& o = (*t)->optimizer();
        f->state = o.param_shard_device_bytes() + o.grad_shard_device_bytes() + o.device_bytes();
      }
    });
  }
  for (auto& th : threads) th.join();
  if (!ok) return false;
  std::sort(step_s.begin(), step_s.end());
  f->tokens_per_s = static_cast<double>(gb) * seq / step_s[step_s.size() / 2];
  f->peak = *std::max_element(peaks.begin(), peaks.end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
  const int a0 = smoke ? 2 : 1;
  const int seq = argc > a0 ? std::atoi(argv[a0]) : (smoke ? 512 : 4096);
  const int steps = argc > a0 + 1 ? std::atoi(argv[a0 + 1]) : (smoke ? 1 : 3);
  if (seq <= 0 || seq % 8 != 0 || steps < 1) {
    std::fprintf(stderr, "usage: cp_bench [--smoke] [seq (a multiple of 8)] [steps >= 1]\n");
    return 2;
  }
  shard::InitLogging("warn");
  const std::string tokens = "/tmp/shardd_cp_bench.u32";
  {
    std::mt19937 rng(1);
    std::vector<uint32_t> t(static_cast<size_t>(seq + 1) * kWorld * (steps + 2) + 1);
    for (auto& x : t) x = rng() % 4096;
    std::ofstream(tokens, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  }
  std::printf("cp_bench: preset bench, %d tokens per sequence, %d CPU ranks as threads, micro-batch 1, "
              "median of %d steps after one warm-up\n",
              seq, kWorld, steps);
  std::printf("  %-4s %12s %14s %14s %16s\n", "C", "tokens/s", "peak MiB/rank", "state MiB", "peak-state MiB");
  double base = 0;
  for (int c : {1, 2, 4}) {
    Figures f;
    if (!RunC(tokens, c, seq, steps, &f)) return 1;
    if (c == 1) base = static_cast<double>(f.peak - f.state);
    const double extra = static_cast<double>(f.peak - f.state);
    std::printf("  C=%-2d %12.0f %14.1f %14.1f %16.1f  (%.2fx C=1's peak-state)\n", c, f.tokens_per_s,
                f.peak / 1048576.0, f.state / 1048576.0, extra / 1048576.0, base > 0 ? extra / base : 0.0);
  }
  std::remove(tokens.c_str());
  return 0;
}
