// Full fine-tuning vs LoRA side by side: tokens/s and per-rank peak memory at
// W = 2 forked processes (Gloo over loopback, one compute thread and one
// OpenBLAS thread each), model preset "bench" (d=256, 4 layers, vocab 4096),
// seq 256, micro-batch 8, global batch 16. Each method runs in its own pair of
// processes (so peak RSS is that method's), 2 warm-up steps then `steps` timed
// ones; step time is the max over ranks, tokens/s uses the median step.
// Memory: the process's peak RSS (getrusage; includes the binary and
// libraries, identical for every method), and the trainer's persistent state
// bytes (parameter, gradient and AdamW shards; adapters with their gradients
// and moments) and peak transient bytes (gathered units, full gradients).
// QLoRA is listed as not built: its NF4 base under FSDP does not exist yet.
//
// usage: lora_bench [steps=8]      Prints figures; never fails on speed.
#include <cblas.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "shard/comm/communicator.h"
#include "shard/common/kv_stores.h"
#include "shard/common/logging.h"
#include "shard/common/thread_pool.h"
#include "shard/train/trainer.h"

namespace {

constexpr int kWorld = 2, kSeq = 256, kMicro = 8;
using Clock = std::chrono::steady_clock;

struct Method {
  const char* name;
  const char* peft;  // the job's peft: section ("" = full fine-tuning)
};
const Method kMethods[] = {
    {"full", ""},
    {"lora r16 all-linear", "peft: {method: lora, r: 16, alpha: 32, target_modules: all-linear}\n"},
    {"lora r8 q,v", "peft: {method: lora, r: 8, alpha: 16}\n"},
};

int RankMain(int rank, const Method& m, int steps, const std::string& dir, int round) {
  ::setenv("SHARDD_NUM_THREADS", "1", 1);
  shard::SetNumComputeThreads(1);
  openblas_set_num_threads(1);
  shard::InitLogging("warn");
  auto store = std::make_shared<shard::FileKvStore>(dir + "/store");
  const std::string yaml = std::string("name: lora-bench\nmodel: {preset: bench}\ndata: {tokens: ") + dir +
                           "/tokens.u32, seq_len: " + std::to_string(kSeq) +
                           "}\ntrain: {steps: 100000, global_batch: " + std::to_string(kMicro * kWorld) +
                           ", micro_batch: " + std::to_string(kMicro) +
                           ", lr: 1.0e-4, log_every: 100000}\nparallel: {strategy: full_shard, world_size: 2}\n"
                           "checkpoint: {resume: none, dir: " + dir + "/ckpt}\nresources: {device: cpu}\n" + m.peft;
  auto job = shard::ParseJobConfig(yaml, "lora_bench.yaml");
  if (!job.ok()) return std::fprintf(stderr, "%s\n", job.status().ToString().c_str()), 1;
  shard::DistContext d;
  d.rank = rank;
  d.world = kWorld;
  d.comm_backend = "gloo";
  d.store = store;
  d.prefix = "bench/" + std::to_string(round) + "/";
  auto t = shard::Trainer::Create(*job, d);
  if (!t.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, t.status().ToString().c_str()), 1;
  shard::Trainer& tr = **t;
  std::vector<double> times;
  for (int s = 0; s < steps + 2; ++s) {
    auto t0 = Clock::now();
    auto st = tr.Step();
    if (!st.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, st.status().ToString().c_str()), 1;
    double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    (void)tr.runtime().AllReduceSum(&wall, 1);  // / kWorld below: the mean over ranks
    if (s >= 2) times.push_back(wall);
  }
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const double figs[3] = {static_cast<double>(ru.ru_maxrss) / 1024.0,
                    (tr.optimizer().param_shard_device_bytes() + tr.optimizer().grad_shard_device_bytes() +
                     tr.optimizer().device_bytes() + (tr.lora() ? tr.lora()->device_bytes() : 0)) /
                        1048576.0,
                    tr.runtime().peak_transient_bytes() / 1048576.0};
  // Each rank writes its own figures; the parent takes the max over ranks.
  std::ofstream(dir + "/figs." + std::to_string(round) + "." + std::to_string(rank))
      << figs[0] << " " << figs[1] << " " << figs[2] << "\n";
  std::sort(times.begin(), times.end());
  if (rank == 0) std::ofstream(dir + "/time." + std::to_string(round)) << times[times.size() / 2] / kWorld << "\n";
  return 0;
}

bool RunPair(const Method& m, int steps, const std::string& dir, int round) {
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(RankMain(r, m, steps, dir, round));
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  if (steps < 1) return std::fprintf(stderr, "usage: lora_bench [steps=8]\n"), 2;
  std::string tmpl = (std::filesystem::temp_directory_path() / "shardd-lora-bench-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) return std::perror("mkdtemp"), 1;
  const std::string dir = tmpl;
  {
    std::mt19937 rng(1);
    std::vector<uint32_t> t(400000);
    for (auto& x : t) x = rng() % 4096;
    std::ofstream(dir + "/tokens.u32", std::ios::binary)
        .write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size() * 4));
  }
  std::printf("lora_bench: W=%d processes x 1 thread, full_shard, model bench, seq %d, micro-batch %d, global batch "
              "%d, %d timed steps per method (median; step time = mean over ranks)\n",
              kWorld, kSeq, kMicro, kMicro * kWorld, steps);
  const double tok = static_cast<double>(kMicro) * kWorld * kSeq;
  double full_tps = 0;
  int round = 0;
  for (const Method& m : kMethods) {
    if (!RunPair(m, steps, dir, round)) {
      std::printf("  %-22s failed (see stderr)\n", m.name);
      ++round;
      continue;
    }
    double median = 0;
    std::ifstream(dir + "/time." + std::to_string(round)) >> median;
    double rss = 0, state = 0, trans = 0;
    for (int r = 0; r < kWorld; ++r) {
      double a = 0, b = 0, c = 0;
      std::ifstream(dir + "/figs." + std::to_string(round) + "." + std::to_string(r)) >> a >> b >> c;
      rss = std::max(rss, a), state = std::max(state, b), trans = std::max(trans, c);
    }
    const double tps = tok / median;
    if (round == 0) full_tps = tps;
    std::printf("  %-22s step %7.1f ms  tokens/s %7.0f (%.2fx full)  per-rank peak RSS %6.1f MiB  state %6.2f MiB  "
                "peak transient %6.2f MiB\n",
                m.name, median * 1e3, tps, full_tps > 0 ? tps / full_tps : 0.0, rss, state, trans);
    std::fflush(stdout);
    ++round;
  }
  std::printf("  %-22s not built (the NF4 base under FSDP; NF4 itself: shard/tensor/nf4.h)\n", "qlora");
  std::filesystem::remove_all(dir);
  return 0;
}
