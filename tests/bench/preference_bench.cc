// DPO vs SFT training throughput on the CPU backend, per trained token.
//
// The same model (preset "bench": 4 layers, d=256, vocab 4096), the same rows
// of 256 and the same trained tokens: N preference pairs (byte tokenizer,
// plain template; prompt 64-96 bytes, replies 96-150) train as DPO with
// micro_batch P pairs, and the same pairs' 2N replies train as SFT rows
// (prompt, chosen), (prompt, rejected), ... unpacked, in that order, with
// micro_batch 2P rows — so every step of the two jobs runs the same token
// rows with the same target masks. DPO differs only in its loss (a factor per
// reply from the pair sums, preference_objective.h) and in the reference
// log-probs, computed once before step 1 (printed apart, not in the steps):
// no second model in the step, so the rates should agree.
//
// The two trainers step alternately (SFT, DPO, SFT, ...) so the shared host's
// drift falls on both alike. Prints, for each: median and mean step time,
// trained (target) tokens/s and all tokens/s, then the DPO/SFT ratio per
// trained token.
//
// usage: preference_bench [steps=8] [pairs_per_micro_batch=4]
//        (--profile: each job's time per backend operation over the measured steps)
//        preference_bench --smoke   (1 measured step of 1 pair: that it starts and prints its figures)
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shard/backend/profiling_backend.h"
#include "shard/common/logging.h"
#include "shard/common/thread_pool.h"
#include "shard/train/trainer.h"

namespace fs = std::filesystem;

namespace {

std::string Letters(std::mt19937& rng, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>('a' + rng() % 26);
  return s;
}

// pairs.jsonl (TRL standard rows) and sft.jsonl (each pair's two replies as
// prompt/response rows, chosen first) of the same `n` pairs.
void WriteData(const fs::path& dir, int n) {
  std::mt19937 rng(7);
  std::ofstream pairs(dir / "pairs.jsonl"), sft(dir / "sft.jsonl");
  for (int i = 0; i < n; ++i) {
    const std::string p = Letters(rng, 64 + rng() % 33), c = Letters(rng, 96 + rng() % 55),
                      r = Letters(rng, 96 + rng() % 55);
    pairs << R"({"prompt":")" << p << R"(","chosen":")" << c << R"(","rejected":")" << r << "\"}\n";
    sft << R"({"prompt":")" << p << R"(","response":")" << c << "\"}\n";
    sft << R"({"prompt":")" << p << R"(","response":")" << r << "\"}\n";
  }
}

struct Run {
  std::string name;
  std::unique_ptr<shard::Trainer> trainer;
  std::vector<double> seconds, cpu_seconds;  // wall and process CPU time of each measured step
  int64_t targets = 0, positions = 0;  // summed over the measured steps
};

double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--smoke") {
      smoke = true;
    } else if (a == "--profile") {
      setenv("SHARDD_PROFILE_OPS", "1", 1);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: preference_bench [steps=8] [pairs_per_micro_batch=4] [--profile] | --smoke\n");
      return 0;
    } else {
      pos.push_back(a);
    }
  }
  const int steps = smoke ? 1 : pos.size() > 0 ? std::atoi(pos[0].c_str()) : 8;
  const int pairs = smoke ? 1 : pos.size() > 1 ? std::atoi(pos[1].c_str()) : 4;
  if (steps < 1 || pairs < 1) {
    std::fprintf(stderr, "preference_bench: steps and pairs_per_micro_batch must be positive integers\n");
    return 2;
  }
  const int warmup = 2, seq = 256;
  shard::InitLogging("warn");
  const fs::path dir = fs::temp_directory_path() / ("shardd_preference_bench." + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  WriteData(dir, (steps + warmup) * pairs);

  auto yaml = [&](const std::string& name, const std::string& data, int micro, const std::string& extra) {
    return "name: " + name + "\nmodel: {preset: bench}\ndata: {jsonl: " + (dir / data).string() +
           ", tokenizer: byte, template: plain, seq_len: " + std::to_string(seq) +
           ", packing: false, shuffle: false}\ntrain: {steps: " + std::to_string(steps + warmup) +
           ", global_batch: " + std::to_string(micro) + ", micro_batch: " + std::to_string(micro) +
           ", lr: 1.0e-4, log_every: 1000}\ncheckpoint: {dir: " + (dir / "ckpt").string() + "}\n" + extra;
  };
  Run runs[2];
  runs[0].name = "SFT";
  runs[1].name = "DPO";
  double setup_seconds[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const std::string y = k == 0 ? yaml("sft", "sft.jsonl", 2 * pairs, "")
                                 : yaml("dpo", "pairs.jsonl", pairs, "preference: {method: dpo, beta: 0.1}\n");
    auto job = shard::ParseJobConfig(y, runs[k].name + ".yaml");
    if (!job.ok()) {
      std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
      return 1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto trainer = shard::Trainer::Create(*job);  // DPO: the reference pass runs here, once
    if (!trainer.ok()) {
      std::fprintf(stderr, "%s: %s\n", runs[k].name.c_str(), trainer.status().ToString().c_str());
      return 1;
    }
    setup_seconds[k] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    runs[k].trainer = std::move(*trainer);
  }
  for (int i = 0; i < warmup + steps; ++i) {
    for (Run& r : runs) {
      if (i == warmup) shard::ResetProfile(r.trainer->backend());
      const double cpu0 = CpuNow();
      auto m = r.trainer->Step();
      const double cpu = CpuNow() - cpu0;
      if (!m.ok()) {
        std::fprintf(stderr, "%s step %d: %s\n", r.name.c_str(), i + 1, m.status().ToString().c_str());
        return 1;
      }
      if (i < warmup) continue;  // allocations and caches
      r.seconds.push_back(m->seconds);
      r.cpu_seconds.push_back(cpu);
      r.targets += m->tokens;
      r.positions += m->positions;
    }
  }
  if (runs[0].targets != runs[1].targets || runs[0].positions != runs[1].positions) {
    std::fprintf(stderr, "preference_bench: the jobs trained different tokens (SFT %lld/%lld, DPO %lld/%lld)\n",
                 static_cast<long long>(runs[0].targets), static_cast<long long>(runs[0].positions),
                 static_cast<long long>(runs[1].targets), static_cast<long long>(runs[1].positions));
    return 1;
  }
  std::printf("preference_bench: model bench, rows of %d, %d pairs (%d rows) per step, %d measured steps each, "
              "threads %d; %lld trained tokens of %lld per step\n",
              seq, pairs, 2 * pairs, steps, shard::NumComputeThreads(),
              static_cast<long long>(runs[0].targets / steps), static_cast<long long>(runs[0].positions / steps));
  double rate[2], cpu_rate[2];
  for (int k = 0; k < 2; ++k) {
    const Run& r = runs[k];
    const double med = Median(r.seconds), per_step = static_cast<double>(r.targets) / steps;
    double total = 0;
    for (double s : r.seconds) total += s;
    rate[k] = per_step / med;
    cpu_rate[k] = per_step / Median(r.cpu_seconds);
    std::printf("  %s  step median %.1f ms  mean %.1f ms  trained tokens/s median %.0f  mean %.0f  "
                "(all tokens/s %.0f); per CPU-second %.0f trained tokens\n",
                r.name.c_str(), med * 1e3, total / steps * 1e3, rate[k], r.targets / total,
                static_cast<double>(r.positions) / steps / med, cpu_rate[k]);
  }
  // CPU seconds are what the step cost whatever the neighbours took of the
  // wall clock (a shared host); both ratios are printed.
  std::printf("  DPO/SFT per trained token: %.3f (median steps, wall), %.3f (median steps, CPU time)\n",
              rate[1] / rate[0], cpu_rate[1] / cpu_rate[0]);
  std::printf("  setup (Trainer::Create): SFT %.2f s, DPO %.2f s with its reference pass over %d pairs (once, "
              "before step 1)\n",
              setup_seconds[0], setup_seconds[1], (steps + warmup) * pairs);
  for (Run& r : runs) {
    const std::string profile = shard::ProfileReport(r.trainer->backend());
    if (!profile.empty()) std::printf("%s operations:\n%s", r.name.c_str(), profile.c_str());
    shard::ResetProfile(r.trainer->backend());  // printed above; not again on destruction
  }
  return 0;
}
