// Single-process training throughput on the CPU backend.
//
// Model: 4 layers, d=256, 8 heads, 4 KV heads, ffn 688, vocab 4096 (preset
// "bench"), seq 256, micro-batch 8 — full optimizer steps (forward, backward,
// clipping, AdamW). Prints tokens/s and achieved model GFLOP/s counted as
// 6N + 12*L*d*T per token (N without the input embedding).
//
// usage: train_bench [steps=6] [micro_batch=8] [activation_checkpointing=0] [--profile] [--offload]
//        [--loss-chunk-rows=N] (train.loss_chunk_rows; default 0 = auto, which keeps the bench's
//        32 MiB of logits in one chunk)
//        train_bench --smoke   (1 measured step of micro-batch 1: that it starts and prints its figures)
// --profile (or SHARDD_PROFILE_OPS=1) adds a table of the time each backend
// operation took over the measured steps. --offload trains with
// parallel.offload_optimizer: true; either way the optimizer step's own time
// (AdamW, plus the host copies when offloaded) is printed.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "shard/backend/profiling_backend.h"
#include "shard/common/logging.h"
#include "shard/common/thread_pool.h"
#include "shard/train/optimizer_state.h"
#include "shard/train/trainer.h"

namespace {

// Median GFLOP/s of five 1024^3 products through the backend's Gemm (the
// same slicing over the compute threads the model's GEMMs get).
double ReferenceSgemmGflops(shard::Backend* backend) {
  const int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  shard::GemmArgs g;
  g.m = g.n = g.k = n;
  g.a = a.data();
  g.lda = n;
  g.b = b.data();
  g.ldb = n;
  g.c = c.data();
  g.ldc = n;
  backend->Gemm(g);  // warm-up
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    backend->Gemm(g);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * n * n * n / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  bool offload = false;
  std::string chunk = "0";
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") {
      smoke = true;
    } else if (a == "--profile") {
      setenv("SHARDD_PROFILE_OPS", "1", 1);
    } else if (a == "--offload") {
      offload = true;
    } else if (a.rfind("--loss-chunk-rows=", 0) == 0) {
      chunk = a.substr(18);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: train_bench [steps=6] [micro_batch=8] [activation_checkpointing=0] [--profile] "
                  "[--offload] [--loss-chunk-rows=N] | --smoke\n");
      return 0;
    } else {
      pos.push_back(a);
    }
  }
  int steps = smoke ? 1 : pos.size() > 0 ? std::atoi(pos[0].c_str()) : 6;
  int micro = smoke ? 1 : pos.size() > 1 ? std::atoi(pos[1].c_str()) : 8;
  bool ckpt = pos.size() > 2 && std::atoi(pos[2].c_str()) != 0;
  if (steps < 1 || micro < 1) {
    std::fprintf(stderr, "train_bench: steps and micro_batch must be positive integers\n");
    return 2;
  }
  const int seq = 256;
  shard::InitLogging("warn");

  std::string tokens = "/tmp/shardd_train_bench.u32";
  {
    std::mt19937 rng(1);
    std::vector<uint32_t> t(200000);
    for (auto& x : t) x = rng() % 4096;
    std::ofstream(tokens, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  }
  std::string yaml = "name: bench\nmodel: {preset: bench}\ndata: {tokens: " + tokens + ", seq_len: " +
                     std::to_string(seq) + "}\ntrain: {steps: " + std::to_string(steps + 2) +
                     ", global_batch: " + std::to_string(micro) + ", micro_batch: " + std::to_string(micro) +
                     ", lr: 1.0e-4, log_every: 1000, loss_chunk_rows: " + chunk + "}\nparallel: {activation_checkpointing: " +
                     (ckpt ? "true" : "false") + ", offload_optimizer: " + (offload ? "true" : "false") + "}\n";
  auto job = shard::ParseJobConfig(yaml, "bench.yaml");
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
    return 1;
  }
  auto trainer = shard::Trainer::Create(*job);
  if (!trainer.ok()) {
    std::fprintf(stderr, "%s\n", trainer.status().ToString().c_str());
    return 1;
  }
  for (int i = 0; i < 2; ++i) (void)(*trainer)->Step();  // warm up allocations and caches
  shard::ResetProfile((*trainer)->backend());
  // What this machine's sgemm gives right now, before and after the steps:
  // the host's speed drifts by +-15% from minute to minute, so the training
  // figure is also given as a fraction of it.
  auto reference = shard::CreateBackend("cpu");
  if (!reference.ok()) {
    std::fprintf(stderr, "%s\n", reference.status().ToString().c_str());
    return 1;
  }
  const double sgemm_before = ReferenceSgemmGflops(reference->get());
  double total = 0;
  double best = 1e30;
  // Process CPU time as well as wall time: on a shared machine the wall clock
  // measures the neighbours; CPU seconds / threads estimates what dedicated
  // cores would give (conservatively: spinning BLAS threads count as busy).
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  std::vector<double> step_seconds, optimizer_seconds;
  const double cpu0 = cpu_now();
  for (int i = 0; i < steps; ++i) {
    auto m = (*trainer)->Step();
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      return 1;
    }
    total += m->seconds;
    step_seconds.push_back(m->seconds);
    optimizer_seconds.push_back((*trainer)->optimizer().last_step_seconds());
    best = std::min(best, m->seconds);
  }
  const double cpu_seconds = cpu_now() - cpu0;
  const double sgemm_after = ReferenceSgemmGflops(reference->get());
  shard::ResetProfile(reference->get());
  const auto& c = (*trainer)->model_config();
  const double tokens_per_step = static_cast<double>(micro) * seq;
  const double flops_per_token = c.TrainFlopsPerToken(seq);
  const double mean = total / steps;
  // The median step resists the host's noise (other guests on this machine
  // slow single steps by up to 50%); the mean is what a whole run gets.
  std::sort(step_seconds.begin(), step_seconds.end());
  auto median_of = [steps](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return steps % 2 ? v[steps / 2] : 0.5 * (v[steps / 2 - 1] + v[steps / 2]);
  };
  const double median = median_of(step_seconds);
  std::printf("train_bench: model bench (N=%.2fM matmul params, L=%d, d=%lld), seq %d, micro-batch %d, "
              "threads %d, activation_checkpointing %d\n",
              c.NumMatmulParams() / 1e6, c.num_layers, static_cast<long long>(c.hidden_size), seq, micro,
              shard::NumComputeThreads(), ckpt ? 1 : 0);
  const double flops_per_step = tokens_per_step * flops_per_token;
  std::printf("  step time  mean %.1f ms  median %.1f ms  best %.1f ms  (%d steps)\n", mean * 1e3, median * 1e3,
              best * 1e3, steps);
  std::printf("  tokens/s   mean %.0f  median %.0f  best %.0f\n", tokens_per_step / mean, tokens_per_step / median,
              tokens_per_step / best);
  std::printf("  GFLOP/s    mean %.1f  median %.1f  best %.1f  (%.1f MFLOP per token)\n", flops_per_step / mean / 1e9,
              flops_per_step / median / 1e9, flops_per_step / best / 1e9, flops_per_token / 1e6);
  const shard::OptimizerState& opt = (*trainer)->optimizer();
  std::printf("  optimizer  median %.2f ms  best %.2f ms  (%s; device: %.1f MiB parameter shards, %.1f MiB gradient "
              "shards, %.1f MiB moments; host: %.1f MiB)\n",
              median_of(optimizer_seconds) * 1e3, *std::min_element(optimizer_seconds.begin(), optimizer_seconds.end()) * 1e3,
              offload ? "offloaded: host AdamW on the host gradients, master copy back" : "AdamW on the device",
              opt.param_shard_device_bytes() / 1048576.0, opt.grad_shard_device_bytes() / 1048576.0,
              opt.device_bytes() / 1048576.0, opt.host_bytes() / 1048576.0);
  const double sgemm = 0.5 * (sgemm_before + sgemm_after);
  std::printf("  reference  sgemm 1024^3 on the same threads: %.1f GFLOP/s before, %.1f after; the median step "
              "ran at %.0f%% of it\n",
              sgemm_before, sgemm_after, 100.0 * flops_per_step / median / 1e9 / sgemm);
  const double cpu_step = cpu_seconds / steps / shard::NumComputeThreads();
  std::printf("  CPU-time estimate for %d dedicated cores: %.0f tokens/s, %.1f GFLOP/s (%.2f CPU-s per step)\n",
              shard::NumComputeThreads(), tokens_per_step / cpu_step, tokens_per_step * flops_per_token / cpu_step / 1e9,
              cpu_seconds / steps);
  const std::string profile = shard::ProfileReport((*trainer)->backend());
  if (!profile.empty()) std::printf("%s", profile.c_str());
  shard::ResetProfile((*trainer)->backend());  // printed above; not again on destruction
  return 0;
}
