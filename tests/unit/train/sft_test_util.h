// Helpers of the SFT trainer tests: a deterministic string-reversal JSONL, a
// job file around it, and a runner that trains W ranks as threads (local
// communicator) and records per-step metrics and the final weights.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shard/train/trainer.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard::sft_testing {

namespace fs = std::filesystem;

// A fresh directory under testing::TempDir().
inline std::string NewDir(const std::string& name) {
  std::string tmpl = testing::TempDir() + "/sft_" + name + "_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

// rows of {"prompt": "rev abcd=", "response": "dcba"} (3..6 letters of a-h),
// from a fixed mt19937 stream (no std:: distribution: the same everywhere).
inline std::string WriteReversalJsonl(const std::string& path, int rows, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::ofstream f(path);
  for (int i = 0; i < rows; ++i) {
    std::string s;
    for (int n = 3 + static_cast<int>(rng() % 4); n > 0; --n) s += static_cast<char>('a' + rng() % 8);
    f << "{\"prompt\":\"rev " << s << "=\",\"response\":\"" << std::string(s.rbegin(), s.rend()) << "\"}\n";
  }
  return path;
}

// An SFT job over `jsonl` checkpointing (if at all) under `ckpt_dir`, which
// also holds the prepared dataset (<ckpt_dir>/sft/data/sft.*).
inline std::string SftJob(const std::string& jsonl, const std::string& ckpt_dir, const std::string& extra = "") {
  return "name: sft\nmodel: {preset: tiny}\n"
         "data: {jsonl: " + jsonl + ", tokenizer: byte, template: plain, seq_len: 32, packing: true}\n"
         "train: {steps: 6, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup_steps: 2, schedule: cosine, "
         "weight_decay: 0.1, grad_clip: 1.0, log_every: 1000}\n"
         "checkpoint: {dir: " + ckpt_dir + ", every_steps: 0, async: true, resume: auto}\n"
         "resources: {device: cpu}\n" + extra;
}

struct RunResult {
  Status status;                           // the first failure of any rank (creation or a step)
  std::map<int64_t, double> losses;        // step -> loss (rank 0)
  std::map<int64_t, int64_t> targets;      // step -> target tokens of the global batch
  std::map<int64_t, int64_t> samples;      // step -> samples the global batch consumed
  int64_t start_step = 0;
  int64_t samples_seen = 0;                // the cursor at the end
  std::vector<std::vector<float>> params;  // gathered final weights per unit
};

// Trains `yaml` (+ overrides) on `world` ranks as threads until step
// `stop_after` (or train.steps), then drops the trainers as a killed run would
// after its last save.
inline RunResult RunSft(const std::string& yaml, int world, const std::vector<std::string>& sets,
                        int64_t stop_after = -1) {
  std::vector<std::string> all = sets;
  all.push_back("parallel.world_size=" + std::to_string(world));
  RunResult out;
  std::vector<Status> status(world);
  std::mutex mu;
  const Status created = testing_ranks::OnTrainerRanks(yaml, world, all, [&](Trainer& tr, int r) {
    if (r == 0) out.start_step = tr.step();
    const int64_t last = stop_after >= 0 ? stop_after : tr.total_steps();
    while (tr.step() < last) {
      auto m = tr.Step();
      if (!m.ok()) {
        status[r] = m.status();
        return;
      }
      if (r == 0) {
        std::lock_guard<std::mutex> lock(mu);
        out.losses[m->step] = m->loss;
        out.targets[m->step] = m->tokens;
        out.samples[m->step] = m->samples;
      }
    }
    std::vector<std::vector<float>> params(tr.layout().num_units());
    for (int u = 0; u < tr.layout().num_units() && status[r].ok(); ++u) status[r] = tr.UnitParams(u, &params[u]);
    if (status[r].ok() && tr.checkpointer()) status[r] = tr.checkpointer()->Wait();
    if (r == 0) {
      out.params = std::move(params);
      out.samples_seen = tr.samples_seen();
    }
  });
  out.status = created;
  for (const auto& s : status) {
    if (!out.status.ok()) break;
    out.status = s;
  }
  return out;
}

inline double MaxAbsDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t u = 0; u < a.size() && u < b.size(); ++u) {
    EXPECT_EQ(a[u].size(), b[u].size());
    for (size_t i = 0; i < a[u].size() && i < b[u].size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(a[u][i]) - b[u][i]));
  }
  return worst;
}

}  // namespace shard::sft_testing
