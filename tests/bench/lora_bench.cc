// Full fine-tuning vs LoRA vs QLoRA side by side: tokens/s and per-rank peak memory at
// W = 2 forked processes (Gloo over loopback, one compute thread and one
// OpenBLAS thread each), model preset "bench" (d=256, 4 layers, vocab 4096),
// seq 256, micro-batch 8, global batch 16. Speed: one pair of processes holds
// every method's trainer and steps them in turn (2 warm-up steps each, then
// `steps` rounds), so a shared machine's load hits them alike; tokens/s uses
// the median step (mean over ranks). Memory: each method alone in its own
// pair of processes (2 steps), so peak RSS is that method's.
// Memory: the process's peak RSS (getrusage; includes the binary and
// libraries, identical for every method), and the trainer's persistent state
// bytes (parameter, gradient and AdamW shards; adapters with their gradients
// and moments) and peak transient bytes (gathered units, full gradients).
// QLoRA's state is its NF4 records (the blocks' linear layers, 4.5 bits per
// weight) plus the unquantised embedding and head shards.
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
    {"qlora r16 all-linear", "peft: {method: qlora, r: 16, alpha: 32, target_modules: all-linear}\n"},
    {"qlora r16 all-linear dq", "peft: {method: qlora, r: 16, alpha: 32, target_modules: all-linear, double_quant: true}\n"},
};

std::unique_ptr<shard::Trainer> MakeTrainer(int rank, const Method& m, const std::string& dir, const std::string& tag,
                                            const std::shared_ptr<shard::KvStore>& store) {
  const std::string yaml = std::string("name: lora-bench\nmodel: {preset: bench}\ndata: {tokens: ") + dir +
                           "/tokens.u32, seq_len: " + std::to_string(kSeq) +
                           "}\ntrain: {steps: 100000, global_batch: " + std::to_string(kMicro * kWorld) +
                           ", micro_batch: " + std::to_string(kMicro) +
                           ", lr: 1.0e-4, log_every: 100000}\nparallel: {strategy: full_shard, world_size: 2}\n"
                           "checkpoint: {resume: none, dir: " + dir + "/ckpt}\nresources: {device: cpu}\n" + m.peft;
  auto job = shard::ParseJobConfig(yaml, "lora_bench.yaml");
  if (!job.ok()) return std::fprintf(stderr, "%s\n", job.status().ToString().c_str()), nullptr;
  shard::DistContext d;
  d.rank = rank;
  d.world = kWorld;
  d.comm_backend = "gloo";
  d.store = store;
  d.prefix = "bench/" + tag + "/";
  auto t = shard::Trainer::Create(*job, d);
  if (!t.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, t.status().ToString().c_str()), nullptr;
  return std::move(*t);
}

// Timed step: the mean over ranks of the wall time (every rank must call it).
double TimedStep(shard::Trainer& tr) {
  auto t0 = Clock::now();
  auto st = tr.Step();
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.status().ToString().c_str());
    std::exit(1);
  }
  double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  (void)tr.runtime().AllReduceSum(&wall, 1);
  return wall / kWorld;
}

// method < 0: the speed phase (every method's trainer in this process, stepped
// in turn, so load from other processes hits them alike); else the memory
// phase of one method alone (peak RSS is then that method's).
int RankMain(int rank, int method, int steps, const std::string& dir) {
  ::setenv("SHARDD_NUM_THREADS", "1", 1);
  shard::SetNumComputeThreads(1);
  openblas_set_num_threads(1);
  shard::InitLogging("warn");
  auto store = std::make_shared<shard::FileKvStore>(dir + "/store");
  const int n = static_cast<int>(std::size(kMethods));
  std::vector<std::unique_ptr<shard::Trainer>> trainers;
  for (int i = 0; i < n; ++i) {
    if (method >= 0 && i != method) continue;
    trainers.push_back(MakeTrainer(rank, kMethods[i], dir, std::to_string(method) + "." + std::to_string(i), store));
    if (!trainers.back()) return 1;
    for (int w = 0; w < 2; ++w) TimedStep(*trainers.back());  // allocations, prefetch order
  }
  if (method >= 0) {
    shard::Trainer& tr = *trainers[0];
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    const double state = (tr.optimizer().param_shard_device_bytes() + tr.optimizer().grad_shard_device_bytes() +
                          tr.optimizer().device_bytes() + (tr.lora() ? tr.lora()->device_bytes() : 0)) /
                         1048576.0;
    std::ofstream(dir + "/mem." + std::to_string(method) + "." + std::to_string(rank))
        << static_cast<double>(ru.ru_maxrss) / 1024.0 << " " << state << " "
        << tr.runtime().peak_transient_bytes() / 1048576.0 << "\n";
    return 0;
  }
  std::vector<std::vector<double>> times(n);
  for (int s = 0; s < steps; ++s)
    for (int i = 0; i < n; ++i) times[i].push_back(TimedStep(*trainers[i]));
  if (rank == 0) {
    std::ofstream out(dir + "/time");
    for (auto& t : times) {
      std::sort(t.begin(), t.end());
      out << t[t.size() / 2] << "\n";
    }
  }
  return 0;
}

bool RunPair(int method, int steps, const std::string& dir) {
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(RankMain(r, method, steps, dir));
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
              "%d; %d timed steps per method, methods stepped in turn (median; step time = mean over ranks); memory "
              "from a separate run of each method\n",
              kWorld, kSeq, kMicro, kMicro * kWorld, steps);
  const int n = static_cast<int>(std::size(kMethods));
  for (int i = 0; i < n; ++i)
    if (!RunPair(i, 0, dir)) return std::printf("  %s: memory run failed (see stderr)\n", kMethods[i].name), 1;
  if (!RunPair(-1, steps, dir)) return std::printf("  speed run failed (see stderr)\n"), 1;
  std::ifstream tin(dir + "/time");
  const double tok = static_cast<double>(kMicro) * kWorld * kSeq;
  double full_tps = 0;
  for (int i = 0; i < n; ++i) {
    double median = 0, rss = 0, state = 0, trans = 0;
    tin >> median;
    for (int r = 0; r < kWorld; ++r) {
      double a = 0, b = 0, c = 0;
      std::ifstream(dir + "/mem." + std::to_string(i) + "." + std::to_string(r)) >> a >> b >> c;
      rss = std::max(rss, a), state = std::max(state, b), trans = std::max(trans, c);
    }
    const double tps = tok / median;
    if (i == 0) full_tps = tps;
    std::printf("  %-24s step %7.1f ms  tokens/s %7.0f (%.2fx full)  per-rank peak RSS %6.1f MiB  state %6.2f MiB  "
                "peak transient %6.2f MiB\n",
                kMethods[i].name, median * 1e3, tps, tps / full_tps, rss, state, trans);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
