// Context parallelism through the trainer (parallel.context_parallel C,
// docs/context-parallel.md), ranks as threads on the local communicator: each
// sequence is split over the C ranks of a CP group, the data loader feeds the
// groups only, and the loss is normalised over the global target count. The
// step-1 loss and every parameter's gradient equal those of the whole
// sequences on one rank (fp32), for packed SFT samples (prompt masks,
// documents across chunk ends) and token windows, at C = 2 and 4 on 2 and 4
// ranks; training continues on the same curve; a checkpoint written at C = 2
// resumes at C = 1 and at C = 2 and continues as the uninterrupted run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include "tests/unit/train/phrase_tokens.h"
#include "tests/unit/train/sft_test_util.h"

namespace shard {
namespace {

using sft_testing::NewDir;
using sft_testing::RunSft;
using sft_testing::SftJob;
using sft_testing::WriteReversalJsonl;

// Step 1's loss and the whole gradient of every unit (the ranks' reduced
// shards put together), before the optimizer touches anything.
struct StepOne {
  Status status;
  double loss = 0;
  double moe_aux = 0;                     // the step's load-balancing loss (MoE models)
  std::vector<std::vector<float>> grads;  // per unit, numel values
};

StepOne RunStepOne(const std::string& yaml, int world, int c, const std::vector<std::string>& extra = {}) {
  StepOne out;
  std::mutex mu;
  std::vector<Status> status(world);
  DistContext base;
  base.gradient_hook = [&](int64_t step, Backend& backend, FsdpRuntime& runtime) {
    if (step != 1) return;
    std::lock_guard<std::mutex> lock(mu);
    if (out.grads.empty()) out.grads.resize(runtime.num_units());
    for (int u = 0; u < runtime.num_units(); ++u) {
      const ShardLayout& sl = runtime.layout(u);
      if (out.grads[u].empty()) out.grads[u].assign(sl.numel, 0.0f);
      const int64_t begin = sl.begin(runtime.shard_rank()), end = std::min(sl.end(runtime.shard_rank()), sl.numel);
      if (end <= begin) continue;
      // Replicas (several ranks with the same shard) hold the same values.
      if (runtime.grads_on_host()) {
        std::copy_n(runtime.host_grad_shard(u), end - begin, out.grads[u].data() + begin);
      } else {
        backend.CopyToHost(out.grads[u].data() + begin, runtime.grad_shard(u), (end - begin) * sizeof(float));
      }
    }
  };
  const std::vector<std::string> sets = {"parallel.world_size=" + std::to_string(world),
                                         "parallel.context_parallel=" + std::to_string(c), "train.steps=1"};
  std::vector<std::string> all = sets;
  all.insert(all.end(), extra.begin(), extra.end());
  out.status = testing_ranks::OnTrainerRanks(
      yaml, world, all,
      [&](Trainer& tr, int r) {
        auto m = tr.Step();
        if (!m.ok()) {
          status[r] = m.status();
          return;
        }
        if (r == 0) out.loss = m->loss, out.moe_aux = m->moe_aux_loss;
      },
      base);
  for (const Status& s : status)
    if (out.status.ok() && !s.ok()) out.status = s;
  return out;
}

// The largest gradient difference relative to the largest gradient.
double RelGradDiff(const StepOne& a, const StepOne& b) {
  EXPECT_EQ(a.grads.size(), b.grads.size());
  double worst = 0, scale = 0;
  for (size_t u = 0; u < a.grads.size() && u < b.grads.size(); ++u) {
    EXPECT_EQ(a.grads[u].size(), b.grads[u].size()) << "unit " << u;
    for (size_t i = 0; i < a.grads[u].size() && i < b.grads[u].size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(a.grads[u][i]) - b.grads[u][i]));
      scale = std::max(scale, std::fabs(static_cast<double>(b.grads[u][i])));
    }
  }
  EXPECT_GT(scale, 0.0);
  return worst / std::max(scale, 1e-30);
}

void ExpectSameStepOne(const std::string& what, const std::string& yaml) {
  const StepOne whole = RunStepOne(yaml, 1, 1);
  ASSERT_TRUE(whole.status.ok()) << whole.status.ToString();
  for (auto [world, c] : {std::pair<int, int>{2, 2}, {4, 2}, {4, 4}}) {
    const StepOne cp = RunStepOne(yaml, world, c);
    ASSERT_TRUE(cp.status.ok()) << what << " world " << world << " C " << c << ": " << cp.status.ToString();
    const double loss_rel = std::fabs(cp.loss - whole.loss) / std::fabs(whole.loss);
    const double grad_rel = RelGradDiff(cp, whole);
    std::printf("%s, world %d, C %d: loss %.7f vs %.7f (rel %.2g), gradients rel %.2g\n", what.c_str(), world, c,
                cp.loss, whole.loss, loss_rel, grad_rel);
    EXPECT_LT(loss_rel, 1e-5) << what << " world " << world << " C " << c;
    EXPECT_LT(grad_rel, 1e-4) << what << " world " << world << " C " << c;
  }
}

std::string PackedSftJob(const std::string& dir) {
  const std::string jsonl = WriteReversalJsonl(dir + "/rev.jsonl", 64);
  return SftJob(jsonl, dir);
}

TEST(CpTrainTest, PackedSftStepOneEqualsTheWholeSequenceOnOneRank) {
  ExpectSameStepOne("packed SFT", PackedSftJob(NewDir("cp_packed")));
}

TEST(CpTrainTest, TokenWindowsStepOneEqualsTheWholeSequenceOnOneRank) {
  const std::string tokens = testing_tokens::MakePhraseTokens("cp_windows", 20000, 256);
  const std::string dir = NewDir("cp_windows");
  const std::string yaml =
      "name: cpw\nmodel: {preset: tiny}\ndata: {tokens: " + tokens + ", seq_len: 32, shuffle: true}\n"
      "train: {steps: 1, global_batch: 8, micro_batch: 2, lr: 3.0e-3, seed: 7, log_every: 1000}\n"
      "checkpoint: {dir: " + dir + ", every_steps: 0}\nresources: {device: cpu}\n";
  ExpectSameStepOne("token windows", yaml);
}

// The sharding strategies, activation checkpointing, optimizer offload and
// two-byte precision compose with the split: C = 2 on 4 ranks gives the
// step-1 loss and gradients of C = 1 on the same 4 ranks, same settings.
TEST(CpTrainTest, ComposesWithStrategiesCheckpointingOffloadAndTwoBytePrecisions) {
  const std::string yaml = PackedSftJob(NewDir("cp_compose"));
  struct Case {
    std::vector<std::string> sets;
    double tol;  // loss and gradients, relative
  };
  const Case cases[] = {
      {{"parallel.strategy=shard_grad_op"}, 1e-4},
      {{"parallel.strategy=hybrid_shard", "parallel.shard_group_size=2"}, 1e-4},
      {{"parallel.strategy=no_shard"}, 1e-4},
      {{"parallel.activation_checkpointing=true"}, 1e-4},
      {{"parallel.offload_optimizer=true"}, 1e-4},
      {{"train.precision=bf16"}, 2e-3},
      {{"train.precision=fp16"}, 2e-3},  // dynamic loss scaling on the same split
  };
  for (Case k : cases) {
    k.sets.push_back("train.micro_batch=2");  // 8 rows over 4 data ranks at C = 1
    std::string what;
    for (const auto& s : k.sets) what += s + " ";
    const StepOne whole = RunStepOne(yaml, 4, 1, k.sets);
    ASSERT_TRUE(whole.status.ok()) << what << whole.status.ToString();
    const StepOne cp = RunStepOne(yaml, 4, 2, k.sets);
    ASSERT_TRUE(cp.status.ok()) << what << cp.status.ToString();
    const double loss_rel = std::fabs(cp.loss - whole.loss) / std::fabs(whole.loss);
    const double grad_rel = RelGradDiff(cp, whole);
    std::printf("%s: world 4 at C 2 vs C 1: loss rel %.2g, gradients rel %.2g\n", what.c_str(), loss_rel,
                grad_rel);
    EXPECT_LT(loss_rel, k.tol) << what;
    EXPECT_LT(grad_rel, k.tol) << what;
  }
}

// LoRA and QLoRA (a frozen base, adapters trained): the loss curve of C = 2
// on 2 ranks is the one rank's.
TEST(CpTrainTest, LoraAndQloraTrainOnTheSameCurve) {
  for (const std::string method : {"lora", "qlora"}) {
    const std::string yaml = PackedSftJob(NewDir("cp_" + method)) + "peft: {method: " + method +
                             ", r: 4, alpha: 8, target_modules: all-linear}\n";
    const auto whole = RunSft(yaml, 1, {"parallel.context_parallel=1"});
    ASSERT_TRUE(whole.status.ok()) << method << ": " << whole.status.ToString();
    const auto cp = RunSft(yaml, 2, {"parallel.context_parallel=2"});
    ASSERT_TRUE(cp.status.ok()) << method << ": " << cp.status.ToString();
    ASSERT_EQ(cp.losses.size(), whole.losses.size());
    double worst = 0;
    for (const auto& [step, loss] : whole.losses) {
      worst = std::max(worst, std::fabs(cp.losses.at(step) - loss) / loss);
      EXPECT_LT(std::fabs(cp.losses.at(step) - loss) / loss, 1e-4) << method << " step " << step;
    }
    std::printf("%s, 6 steps at C 2 vs one rank: worst relative loss difference %.2g\n", method.c_str(), worst);
  }
}

// Several steps: the curve and the weights stay on the whole-sequence run's.
TEST(CpTrainTest, PackedSftTrainsOnTheSameCurve) {
  const std::string yaml = PackedSftJob(NewDir("cp_curve"));
  const auto whole = RunSft(yaml, 2, {"parallel.context_parallel=1"});
  ASSERT_TRUE(whole.status.ok()) << whole.status.ToString();
  const auto cp = RunSft(yaml, 4, {"parallel.context_parallel=4"});
  ASSERT_TRUE(cp.status.ok()) << cp.status.ToString();
  ASSERT_EQ(cp.losses.size(), whole.losses.size());
  for (const auto& [step, loss] : whole.losses) {
    EXPECT_LT(std::fabs(cp.losses.at(step) - loss) / loss, 1e-4) << "step " << step;
    EXPECT_EQ(cp.targets.at(step), whole.targets.at(step)) << "step " << step;
    EXPECT_EQ(cp.samples.at(step), whole.samples.at(step)) << "step " << step;
  }
  const double dw = sft_testing::MaxAbsDiff(cp.params, whole.params);
  std::printf("6 steps, 4 ranks at C 4 vs 2 ranks at C 1: weights differ by at most %.3g\n", dw);
  EXPECT_LT(dw, 1e-4);
}

// A checkpoint does not depend on C: written at C = 2, resumed at C = 1 and
// at C = 2, both continue as the uninterrupted C = 2 run.
TEST(CpTrainTest, ResumeWithAnotherContextParallel) {
  const std::string dir = NewDir("cp_resume");
  const std::string jsonl = WriteReversalJsonl(dir + "/rev.jsonl", 64);
  const std::vector<std::string> every3 = {"checkpoint.every_steps=3", "checkpoint.async=false"};
  auto with = [&](const std::vector<std::string>& a, const std::string& s) {
    std::vector<std::string> all = a;
    all.push_back(s);
    return all;
  };
  const auto straight = RunSft(SftJob(jsonl, NewDir("cp_straight")), 2, with(every3, "parallel.context_parallel=2"));
  ASSERT_TRUE(straight.status.ok()) << straight.status.ToString();
  ASSERT_EQ(straight.losses.size(), 6u);
  for (int resume_c : {1, 2}) {
    const std::string run_dir = NewDir("cp_resume_" + std::to_string(resume_c));
    const std::string yaml = SftJob(jsonl, run_dir);
    const auto first = RunSft(yaml, 2, with(every3, "parallel.context_parallel=2"), 3);
    ASSERT_TRUE(first.status.ok()) << first.status.ToString();
    const auto second = RunSft(yaml, 2, with(every3, "parallel.context_parallel=" + std::to_string(resume_c)));
    ASSERT_TRUE(second.status.ok()) << second.status.ToString();
    EXPECT_EQ(second.start_step, 3) << "C " << resume_c << " did not resume from step 3";
    ASSERT_EQ(second.losses.size(), 3u);
    double worst = 0;
    for (const auto& [step, loss] : second.losses) {
      const double rel = std::fabs(loss - straight.losses.at(step)) / straight.losses.at(step);
      worst = std::max(worst, rel);
      EXPECT_LT(rel, 1e-4) << "resumed at C " << resume_c << ", step " << step;
      EXPECT_EQ(second.samples.at(step), straight.samples.at(step)) << "step " << step;
    }
    EXPECT_EQ(second.samples_seen, straight.samples_seen);
    std::printf("checkpoint at C 2, resumed at C %d: steps 4-6 within %.2g of the uninterrupted run\n", resume_c,
                worst);
  }
}

// eval: during training scores whole sequences (its own model, not split)
// on every rank: the eval loss of a C = 2 run is the C = 1 run's.
TEST(CpTrainTest, EvalDuringTrainingScoresAsWithoutIt) {
  const std::string dir = NewDir("cp_eval");
  const std::string yaml = PackedSftJob(dir) + "eval: {data: " + WriteReversalJsonl(dir + "/held.jsonl", 12, 9) +
                           ", every_steps: 2, exact_match: true}\n";
  std::map<int, std::map<int64_t, std::pair<double, double>>> eval;  // C -> step -> (loss, exact match)
  std::mutex mu;
  for (int c : {1, 2}) {
    const Status st = testing_ranks::OnTrainerRanks(
        yaml, 2, {"parallel.world_size=2", "parallel.context_parallel=" + std::to_string(c), "train.steps=4"},
        [&](Trainer& tr, int r) {
          const Status run = tr.Run([&](const StepMetrics& m) {
            if (r != 0 || m.eval_samples == 0) return;
            std::lock_guard<std::mutex> lock(mu);
            eval[c][m.step] = {m.eval_loss, m.eval_exact_match};
          });
          EXPECT_TRUE(run.ok()) << run.ToString();
        });
    ASSERT_TRUE(st.ok()) << "C " << c << ": " << st.ToString();
  }
  ASSERT_EQ(eval[1].size(), 2u);
  ASSERT_EQ(eval[2].size(), 2u);
  for (const auto& [step, e] : eval[1]) {
    EXPECT_LT(std::fabs(eval[2][step].first - e.first) / e.first, 1e-5) << "step " << step;
    EXPECT_EQ(eval[2][step].second, e.second) << "step " << step;
    std::printf("eval at step %lld: loss %.6f at C 2, %.6f at C 1\n", static_cast<long long>(step),
                eval[2][step].first, e.first);
  }
}

// MoE under CP: routing is per token, but the load-balancing loss is a
// product of means over the whole micro-batch's real tokens and the z-loss a
// mean over them; the CP group sums the counts before forming either, so step
// 1's loss, aux loss and gradients equal the whole sequences' on one rank.
// (Without the group's sums each rank's aux gradient comes from its own
// chunks' counts and the gradients are off.)
TEST(CpTrainTest, MoeAuxAndZLossStepOneEqualsTheWholeSequenceOnOneRank) {
  const std::string dir = NewDir("cp_moe");
  const std::string yaml = PackedSftJob(dir);
  for (const char* preset : {"tiny-qwen3-moe", "tiny-mixtral"}) {
    const std::vector<std::string> sets = {std::string("model.preset=") + preset, "moe.aux_loss_coef=0.5",
                                           "moe.z_loss_coef=0.2"};
    const StepOne whole = RunStepOne(yaml, 1, 1, sets);
    ASSERT_TRUE(whole.status.ok()) << preset << ": " << whole.status.ToString();
    EXPECT_GT(whole.moe_aux, 0.0) << preset;
    // micro_batch 4 of global_batch 8: the same two micro-batches of rows on every layout. The last is
    // C = 2 with activation checkpointing (the recompute counts nothing; the sums are of the first forward).
    struct Layout {
      int world, c;
      bool checkpointing;
    };
    for (auto [world, c, checkpointing] : {Layout{2, 2, false}, {4, 2, false}, {4, 4, false}, {2, 2, true}}) {
      std::vector<std::string> with = sets;
      if (checkpointing) with.push_back("parallel.activation_checkpointing=true");
      const StepOne cp = RunStepOne(yaml, world, c, with);
      ASSERT_TRUE(cp.status.ok()) << preset << ": " << cp.status.ToString();
      const double loss_rel = std::fabs(cp.loss - whole.loss) / std::fabs(whole.loss);
      const double aux_rel = std::fabs(cp.moe_aux - whole.moe_aux) / std::fabs(whole.moe_aux);
      const double grad_rel = RelGradDiff(cp, whole);
      std::printf("%s, world %d, C %d%s: loss rel %.2g, aux %.7f vs %.7f (rel %.2g), gradients rel %.2g\n", preset,
                  world, c, checkpointing ? ", checkpointing" : "", loss_rel, cp.moe_aux, whole.moe_aux, aux_rel,
                  grad_rel);
      EXPECT_LT(loss_rel, 1e-5) << preset << " world " << world << " C " << c;
      EXPECT_LT(aux_rel, 1e-5) << preset << " world " << world << " C " << c;
      EXPECT_LT(grad_rel, 1e-4) << preset << " world " << world << " C " << c;
    }
  }
}

// "rev abc..=" pairs: chosen the word reversed, rejected the word. 5-12
// letters: the replies' targets reach into several chunks of 32 positions.
std::string WritePairs(const std::string& path, int rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::ofstream f(path);
  for (int i = 0; i < rows; ++i) {
    std::string w;
    for (int n = 5 + static_cast<int>(rng() % 8); n > 0; --n) w += static_cast<char>('a' + rng() % 8);
    const std::string rev(w.rbegin(), w.rend());
    f << "{\"prompt\":\"rev " << w << "=\",\"chosen\":\"" << rev << "\",\"rejected\":\""
      << (rev == w ? w + "a" : w) << "\"}\n";
  }
  return path;
}

std::string PrefJob(const std::string& dir, const std::string& method, const std::string& jsonl) {
  return "name: pref\nmodel: {preset: tiny}\n"
         "data: {jsonl: " + jsonl + ", tokenizer: byte, template: plain, seq_len: 32}\n"
         "train: {steps: 1, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 0, schedule: constant, "
         "precision: fp32, log_every: 1000}\n"
         "checkpoint: {dir: " + dir + "/" + method + ", every_steps: 0, async: false, resume: none}\n"
         "resources: {device: cpu}\npreference: {method: " + method + ", beta: 0.5}\n";
}

// Preference pairs under CP: both replies of a pair are split over the
// group, each reply's summed log-prob (and target count) is summed over it
// before the pair loss, and every member's backward gets d(loss)/d(logp) of
// each row; the reference pass scores split rows the same way. DPO and ORPO:
// step 1's loss and gradients equal the whole rows' on one rank.
TEST(CpTrainTest, PreferenceStepOneEqualsTheWholeSequenceOnOneRank) {
  const std::string dir = NewDir("cp_pref");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 32, 3);
  for (const char* method : {"dpo", "orpo"}) {
    const std::string yaml = PrefJob(dir, method, jsonl);
    const StepOne whole = RunStepOne(yaml, 1, 1);
    ASSERT_TRUE(whole.status.ok()) << method << ": " << whole.status.ToString();
    for (auto [world, c] : {std::pair<int, int>{2, 2}, {4, 2}, {4, 4}}) {
      const StepOne cp = RunStepOne(yaml, world, c);
      ASSERT_TRUE(cp.status.ok()) << method << " world " << world << " C " << c << ": " << cp.status.ToString();
      const double loss_rel = std::fabs(cp.loss - whole.loss) / std::fabs(whole.loss);
      const double grad_rel = RelGradDiff(cp, whole);
      std::printf("%s, world %d, C %d: loss %.7f vs %.7f (rel %.2g), gradients rel %.2g\n", method, world, c,
                  cp.loss, whole.loss, loss_rel, grad_rel);
      EXPECT_LT(loss_rel, 1e-5) << method << " world " << world << " C " << c;
      EXPECT_LT(grad_rel, 1e-4) << method << " world " << world << " C " << c;
    }
  }
}

// DPO training and eval: on held-out pairs under CP: 4 steps at C = 2 on 2
// ranks stay on the C = 1 curve (the reference pass and eval score split
// rows; each group counts its pairs once).
TEST(CpTrainTest, PreferenceTrainsAndEvaluatesOnTheSameCurve) {
  const std::string dir = NewDir("cp_pref_curve");
  const std::string yaml = PrefJob(dir, "dpo", WritePairs(dir + "/pairs.jsonl", 32, 5)) +
                           "eval: {data: " + WritePairs(dir + "/held.jsonl", 10, 7) + ", every_steps: 2}\n";
  std::map<int, std::map<int64_t, StepMetrics>> steps;  // C -> step -> rank 0's metrics
  std::mutex mu;
  for (int c : {1, 2}) {
    const Status st = testing_ranks::OnTrainerRanks(
        yaml, 2,
        {"parallel.world_size=2", "parallel.context_parallel=" + std::to_string(c), "train.steps=4",
         "checkpoint.dir=" + dir + "/c" + std::to_string(c)},
        [&](Trainer& tr, int r) {
          const Status run = tr.Run([&](const StepMetrics& m) {
            if (r != 0) return;
            std::lock_guard<std::mutex> lock(mu);
            steps[c][m.step] = m;
          });
          EXPECT_TRUE(run.ok()) << run.ToString();
        });
    ASSERT_TRUE(st.ok()) << "C " << c << ": " << st.ToString();
  }
  ASSERT_EQ(steps[1].size(), 4u);
  ASSERT_EQ(steps[2].size(), 4u);
  for (const auto& [step, m] : steps[1]) {
    const StepMetrics& cp = steps[2][step];
    std::printf("dpo step %lld: loss %.7f at C 2, %.7f at C 1; pairs %lld / %lld; eval loss %.7f / %.7f over %lld / "
                "%lld pairs\n",
                static_cast<long long>(step), cp.loss, m.loss, static_cast<long long>(cp.pairs),
                static_cast<long long>(m.pairs), cp.eval_loss, m.eval_loss, static_cast<long long>(cp.eval_pairs),
                static_cast<long long>(m.eval_pairs));
    EXPECT_LT(std::fabs(cp.loss - m.loss), 1e-5 * std::fabs(m.loss)) << "step " << step;
    EXPECT_EQ(cp.pairs, m.pairs) << "step " << step;
    EXPECT_EQ(cp.eval_pairs, m.eval_pairs) << "step " << step;
    if (m.eval_pairs > 0) EXPECT_LT(std::fabs(cp.eval_loss - m.eval_loss), 1e-5 * std::fabs(m.eval_loss)) << step;
  }
  EXPECT_EQ(steps[1][2].eval_pairs, 10);
}

}  // namespace
}  // namespace shard
