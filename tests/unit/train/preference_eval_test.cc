// eval: on held-out pairs for a preference: job. The pairs' metrics are TRL's
// (checked against double formulas written here, from given log-probs); a
// trainer's eval (ranks as threads, 1 and 2 ranks) equals an independent
// scoring of its final weights, one reply per forward, against the stored
// reference, which is the starting weights' own; the reference of the eval
// pairs is computed in the same pass as the training pairs' and read back
// (never recomputed) by a resumed attempt, whose eval then uses the stored
// values; and what a preference job's eval refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/data/prepared_dataset.h"
#include "shard/train/local_params.h"
#include "shard/train/pair_scoring.h"
#include "tests/unit/train/sft_test_util.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

using sft_testing::NewDir;
namespace fs = std::filesystem;

double LogSig(double x) { return -std::log1p(std::exp(-x)); }

// ---- the metrics from given log-probs -------------------------------------

TEST(PairEvalTest, ScoredPairSumsAreTrlsMetrics) {
  std::mt19937 rng(5);
  auto uni = [&](double lo, double hi) { return lo + (hi - lo) * (rng() / 4294967296.0); };
  ScoredPairs s;
  const int64_t n_all = 9;
  std::vector<double> ref(2 * n_all);
  for (double& r : ref) r = uni(-30, -2);
  for (int64_t id : {7, 2, 5, 0, 8}) {  // a rank's pairs: any ids of the set
    s.pairs.push_back(id);
    for (int side = 0; side < 2; ++side) {
      s.logps.push_back(uni(-30, -2));
      s.tokens.push_back(3 + static_cast<int64_t>(rng() % 9));
    }
  }
  for (const char* method : {"dpo", "ipo", "orpo"}) {
    SCOPED_TRACE(method);
    PreferenceConfig c;
    c.method = std::string(method) == "dpo" ? PreferenceMethod::kDpo
               : std::string(method) == "ipo" ? PreferenceMethod::kIpo
                                              : PreferenceMethod::kOrpo;
    c.beta = 0.2;
    if (c.method == PreferenceMethod::kDpo) c.label_smoothing = 0.1;
    if (c.method == PreferenceMethod::kOrpo) c.orpo_lambda = 0.3;
    auto got = ScoredPairSums(c, s, c.needs_reference() ? ref : std::vector<double>{});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    double loss = 0, rc = 0, rr = 0, acc = 0, lc = 0, lr = 0, nll = 0;
    for (size_t k = 0; k < s.pairs.size(); ++k) {
      const int64_t id = s.pairs[k];
      const double S_c = s.logps[2 * k], S_r = s.logps[2 * k + 1];
      const double N_c = static_cast<double>(s.tokens[2 * k]), N_r = static_cast<double>(s.tokens[2 * k + 1]);
      const double R_c = ref[2 * id], R_r = ref[2 * id + 1];
      double l = 0, wc = 0, wr = 0, pc = S_c, pr = S_r;
      if (c.method == PreferenceMethod::kDpo) {
        const double z = c.beta * ((S_c - R_c) - (S_r - R_r));
        l = -(1 - c.label_smoothing) * LogSig(z) - c.label_smoothing * LogSig(-z);
        wc = c.beta * (S_c - R_c);
        wr = c.beta * (S_r - R_r);
      } else if (c.method == PreferenceMethod::kIpo) {
        const double h = (S_c - R_c) / N_c - (S_r - R_r) / N_r;
        l = (h - 1 / (2 * c.beta)) * (h - 1 / (2 * c.beta));
        wc = c.beta * (S_c - R_c) / N_c;
        wr = c.beta * (S_r - R_r) / N_r;
        pc = S_c / N_c;
        pr = S_r / N_r;
      } else {
        pc = S_c / N_c;
        pr = S_r / N_r;
        const double lo_c = pc - std::log(1 - std::exp(pc)), lo_r = pr - std::log(1 - std::exp(pr));
        l = -pc - c.orpo_lambda * LogSig(lo_c - lo_r);
        wc = c.beta * pc;
        wr = c.beta * pr;
        nll += -pc;
      }
      loss += l;
      rc += wc;
      rr += wr;
      acc += wc > wr ? 1 : 0;
      lc += pc;
      lr += pr;
    }
    EXPECT_EQ(got->pairs, 5);
    EXPECT_NEAR(got->loss, loss, 1e-12 * std::abs(loss) + 1e-12);
    EXPECT_NEAR(got->reward_chosen, rc, 1e-12 * std::abs(rc) + 1e-12);
    EXPECT_NEAR(got->reward_rejected, rr, 1e-12 * std::abs(rr) + 1e-12);
    EXPECT_EQ(got->accurate, acc);
    EXPECT_NEAR(got->logps_chosen, lc, 1e-12 * std::abs(lc));
    EXPECT_NEAR(got->logps_rejected, lr, 1e-12 * std::abs(lr));
    EXPECT_NEAR(got->nll, nll, 1e-12 * std::abs(nll) + 1e-12);
  }
  PreferenceConfig dpo;
  dpo.method = PreferenceMethod::kDpo;
  auto short_ref = ScoredPairSums(dpo, s, std::vector<double>(10, 0.0));  // covers pairs 0..4: not 7, 5, 8
  ASSERT_FALSE(short_ref.ok());
  EXPECT_NE(short_ref.status().message().find("no reference log-probs for pair 7"), std::string::npos)
      << short_ref.status().ToString();
}

// ---- through the trainer ----------------------------------------------------

// "rev abc=" -> chosen "cba", rejected the word as it was.
std::string WritePairs(const std::string& path, int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::ofstream f(path);
  for (int i = 0; i < rows; ++i) {
    std::string s;
    for (int n = 3 + static_cast<int>(rng() % 4); n > 0; --n) s += static_cast<char>('a' + rng() % 8);
    std::string rev(s.rbegin(), s.rend());
    std::string wrong = rev == s ? s + "a" : s;
    f << "{\"prompt\":\"rev " << s << "=\",\"chosen\":\"" << rev << "\",\"rejected\":\"" << wrong << "\"}\n";
  }
  return path;
}

std::string Job(const std::string& dir, const std::string& ckpt, const std::string& extra) {
  return "name: pref\nmodel: {preset: tiny}\n"
         "data: {jsonl: " + dir + "/train.jsonl, tokenizer: byte, template: plain, seq_len: 32}\n"
         "train: {steps: 4, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 0, schedule: constant, "
         "precision: fp32, log_every: 1000}\n"
         "checkpoint: {dir: " + ckpt + ", every_steps: 2, async: false, resume: auto}\n"
         "resources: {device: cpu}\n" + extra;
}

std::string EvalSection(const std::string& dir) { return "eval: {data: " + dir + "/held.jsonl, every_steps: 2}\n"; }

struct EvalRun {
  Status status;
  std::map<int64_t, StepMetrics> steps;    // rank 0's, from Run's callback
  std::vector<std::vector<float>> params;  // final weights
  std::vector<int> reference_passes;       // per rank, after Create
  int64_t start_step = -1;                 // the step rank 0 resumed at
};

// Trains with Trainer::Run (eval included) on `world` ranks as threads; with
// stop_after >= 0, takes that many Steps instead (no eval) and stops.
EvalRun Train(const std::string& yaml, int world, int64_t stop_after = -1, const DistContext& base = {}) {
  EvalRun out;
  out.reference_passes.assign(world, -1);
  std::vector<Status> status(world);
  std::mutex mu;
  out.status = testing_ranks::OnTrainerRanks(
      yaml, world, {"parallel.world_size=" + std::to_string(world)},
      [&](Trainer& tr, int r) {
        out.reference_passes[r] = tr.reference_passes();
        if (r == 0) out.start_step = tr.step();
        if (stop_after >= 0) {
          while (tr.step() < stop_after && status[r].ok()) status[r] = tr.Step().status();
          return;
        }
        status[r] = tr.Run([&](const StepMetrics& m) {
          if (r != 0) return;
          std::lock_guard<std::mutex> lock(mu);
          out.steps[m.step] = m;
        });
        std::vector<std::vector<float>> params(tr.layout().num_units());
        for (int u = 0; u < tr.layout().num_units() && status[r].ok(); ++u) status[r] = tr.UnitParams(u, &params[u]);
        if (r == 0) out.params = std::move(params);
      },
      base);
  for (const Status& s : status)
    if (out.status.ok() && !s.ok()) out.status = s;
  return out;
}

// The stored reference of the eval pairs: <ckpt>/pref/data/eval.ref-<key>.f64.
fs::path EvalReferenceFile(const std::string& ckpt) {
  fs::path found;
  for (const auto& e : fs::directory_iterator(ckpt + "/pref/data"))
    if (e.path().filename().string().rfind("eval.ref-", 0) == 0) found = e.path();
  return found;
}

std::vector<double> ReadReference(const fs::path& path) {
  auto bytes = ReadFileToString(path.string());
  EXPECT_TRUE(bytes.ok());
  uint64_t n = 0;
  std::memcpy(&n, bytes->data() + 8, 8);
  std::vector<double> v(n);
  std::memcpy(v.data(), bytes->data() + 16, n * sizeof(double));
  return v;
}

void WriteReference(const fs::path& path, const std::vector<double>& v) {
  std::string out("SHDREF01", 8);
  const uint64_t n = v.size(), h = Xxh64(v.data(), v.size() * sizeof(double));
  out.append(reinterpret_cast<const char*>(&n), 8);
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
  out.append(reinterpret_cast<const char*>(&h), 8);
  ASSERT_TRUE(WriteFileAtomic(path.string(), out).ok());
}

// Each reply of the eval pairs scored alone in a row of its own (no
// PairBatcher, no sharding): its summed target log-prob under `params`.
std::vector<double> ScoreAlone(const std::string& prefix, const std::vector<std::vector<float>>& params) {
  auto data = PreparedDataset::Open(prefix);
  EXPECT_TRUE(data.ok()) << data.status().ToString();
  auto backend = CreateBackend("cpu");
  const LlamaConfig c = *LlamaPreset("tiny");
  auto local = LocalParams::Create(backend->get(), ParamLayout::ForLlama(c), false);
  EXPECT_TRUE((*local)->LoadUnits(params).ok());
  ModelOptions mo;
  mo.max_batch = 1;
  mo.max_seq = 32;
  auto model = LlamaModel::Create(c, backend->get(), mo);
  std::vector<int32_t> tok(32), tgt(32), pos(32);
  auto d_tok = DeviceBuffer::Create(backend->get(), 32), d_tgt = DeviceBuffer::Create(backend->get(), 32),
       d_pos = DeviceBuffer::Create(backend->get(), 32);
  std::vector<double> out;
  for (int64_t s = 0; s < data->num_samples(); ++s) {
    const SampleView v = data->sample(s);
    for (int64_t t = 0; t < 32; ++t) {
      const bool in = t + 1 < v.length;
      tok[t] = t < v.length ? static_cast<int32_t>(v.tokens[t]) : 0;
      tgt[t] = in && v.mask[t + 1] ? static_cast<int32_t>(v.tokens[t + 1]) : -1;
      pos[t] = static_cast<int32_t>(t);
    }
    (*backend)->CopyToDevice(d_tok->data(), tok.data(), 32 * sizeof(int32_t));
    (*backend)->CopyToDevice(d_tgt->data(), tgt.data(), 32 * sizeof(int32_t));
    (*backend)->CopyToDevice(d_pos->data(), pos.data(), 32 * sizeof(int32_t));
    DeviceBatch b{1, 32, d_tok->as_int(), d_tgt->as_int(), d_pos->as_int(), nullptr};
    auto ce = (*model)->ForwardLoss(b, **local);
    EXPECT_TRUE(ce.ok());
    out.push_back(-*ce);
  }
  return out;
}

// DPO (beta 0.5) metrics of the pairs in double: from the policy's and the
// reference's per-reply log-probs. near_ties: pairs whose reward margin is too
// small for fp32 summation order to decide which side wins.
struct DpoExpect {
  double loss = 0, chosen = 0, rejected = 0, accuracy = 0, margin = 0, logps_c = 0, logps_r = 0;
  int near_ties = 0;
};
DpoExpect ExpectDpo(const std::vector<double>& S, const std::vector<double>& R, double beta) {
  DpoExpect e;
  const size_t n = S.size() / 2;
  for (size_t k = 0; k < n; ++k) {
    const double wc = beta * (S[2 * k] - R[2 * k]), wr = beta * (S[2 * k + 1] - R[2 * k + 1]);
    e.loss += -LogSig(wc - wr);
    e.chosen += wc;
    e.rejected += wr;
    e.accuracy += wc > wr ? 1 : 0;
    e.logps_c += S[2 * k];
    e.logps_r += S[2 * k + 1];
    e.near_ties += std::abs(wc - wr) < 1e-4 ? 1 : 0;
  }
  for (double* v : {&e.loss, &e.chosen, &e.rejected, &e.accuracy, &e.logps_c, &e.logps_r}) *v /= n;
  e.margin = e.chosen - e.rejected;
  return e;
}

TEST(PairEvalTest, EvalEqualsAnIndependentScoringAtOneAndTwoRanks) {
  const std::string dir = NewDir("paireval");
  WritePairs(dir + "/train.jsonl", 40, 3);
  WritePairs(dir + "/held.jsonl", 7, 99);  // 7 pairs, micro 2: at 2 ranks one runs a placeholder forward
  const std::string pref = "preference: {method: dpo, beta: 0.5}\n" + EvalSection(dir);
  // The starting weights (the seeded init), for the reference's own check.
  std::vector<std::vector<float>> init;
  ASSERT_TRUE(testing_ranks::OnTrainerRanks(Job(dir, dir + "/init", pref), 1, {"parallel.world_size=1"},
                                            [&](Trainer& tr, int) {
                                              init.resize(tr.layout().num_units());
                                              for (int u = 0; u < tr.layout().num_units(); ++u)
                                                ASSERT_TRUE(tr.UnitParams(u, &init[u]).ok());
                                            })
                  .ok());
  DistContext tb;
  tb.tensorboard = true;
  std::map<int, EvalRun> runs;
  for (int world : {1, 2}) {
    runs[world] = Train(Job(dir, dir + "/w" + std::to_string(world), pref), world, -1, tb);
    const EvalRun& run = runs[world];
    ASSERT_TRUE(run.status.ok()) << run.status.ToString();
    for (int r = 0; r < world; ++r) EXPECT_EQ(run.reference_passes[r], 2) << "training and eval pairs, rank " << r;
    EXPECT_EQ(run.steps.at(1).eval_pairs, 0);
    EXPECT_EQ(run.steps.at(2).eval_pairs, 7);
    EXPECT_EQ(run.steps.at(2).eval_samples, 7);
    EXPECT_EQ(run.steps.at(2).eval_exact_match, -1);
    const std::string ckpt = dir + "/w" + std::to_string(world);
    const std::vector<double> R = ReadReference(EvalReferenceFile(ckpt));
    ASSERT_EQ(R.size(), 14u);
    // The stored reference is the starting weights' own log-probs.
    const std::string prefix = ckpt + "/pref/data/eval";
    const std::vector<double> R_alone = ScoreAlone(prefix, init);
    for (size_t i = 0; i < R.size(); ++i) EXPECT_NEAR(R[i], R_alone[i], 1e-5 * std::abs(R_alone[i])) << i;
    // The last eval: the final weights scored alone, against that reference.
    const DpoExpect e = ExpectDpo(ScoreAlone(prefix, run.params), R, 0.5);
    const StepMetrics& m = run.steps.at(4);
    std::printf("[ measured ] %d rank(s), step 4 eval: loss %.6f (alone %.6f) rewards/accuracies %.3f (alone %.3f) "
                "rewards/margins %.5f (alone %.5f); step 2 loss %.6f\n",
                world, m.eval_loss, e.loss, m.eval_rewards_accuracies, e.accuracy, m.eval_rewards_margins, e.margin,
                run.steps.at(2).eval_loss);
    EXPECT_NEAR(m.eval_loss, e.loss, 1e-5 * e.loss);
    EXPECT_NEAR(m.eval_rewards_chosen, e.chosen, 2e-5 * std::abs(e.chosen) + 1e-6);
    EXPECT_NEAR(m.eval_rewards_rejected, e.rejected, 2e-5 * std::abs(e.rejected) + 1e-6);
    EXPECT_NEAR(m.eval_rewards_margins, e.margin, 2e-5 * std::abs(e.margin) + 1e-6);
    EXPECT_NEAR(m.eval_logps_chosen, e.logps_c, 1e-5 * std::abs(e.logps_c));
    EXPECT_NEAR(m.eval_logps_rejected, e.logps_r, 1e-5 * std::abs(e.logps_r));
    EXPECT_LE(std::abs(m.eval_rewards_accuracies - e.accuracy) * 7, e.near_ties + 1e-9);
    EXPECT_EQ(m.eval_nll, 0);
  }
  EXPECT_NEAR(runs[1].steps.at(4).eval_loss, runs[2].steps.at(4).eval_loss, 2e-5 * runs[1].steps.at(4).eval_loss);
  EXPECT_LT(runs[1].steps.at(4).eval_loss, std::log(2.0)) << "DPO did not generalise to the held-out pairs";
  // TensorBoard: TRL's eval tags (rank 0's event file of the 2-rank run).
  std::string events;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/w2"))
    if (e.path().filename().string().rfind("events.out.tfevents", 0) == 0) {
      std::ifstream f(e.path(), std::ios::binary);
      events.assign(std::istreambuf_iterator<char>(f), {});
    }
  for (const char* tag : {"eval/loss", "eval/rewards/chosen", "eval/rewards/rejected", "eval/rewards/accuracies",
                          "eval/rewards/margins", "eval/logps/chosen", "eval/logps/rejected"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag;
  EXPECT_EQ(events.find("eval/nll"), std::string::npos) << "dpo has no nll";
  fs::remove_all(dir);
}

// Stopped at step 2 (its checkpoint), the stored eval reference changed, then
// resumed: no reference pass runs, and the eval at step 4 shows exactly the
// change (the policy's log-probs are the uninterrupted run's: resume is
// bitwise), so eval reads the stored values.
TEST(PairEvalTest, EvalUsesTheStoredReferenceAndAResumeNeverRecomputesIt) {
  const std::string dir = NewDir("paireval_ref");
  WritePairs(dir + "/train.jsonl", 24, 3);
  WritePairs(dir + "/held.jsonl", 5, 99);
  const std::string pref = "preference: {method: dpo, beta: 0.5}\n" + EvalSection(dir);
  const EvalRun straight = Train(Job(dir, dir + "/straight", pref), 2);
  ASSERT_TRUE(straight.status.ok()) << straight.status.ToString();
  const std::string yaml = Job(dir, dir + "/stop", pref);
  const EvalRun first = Train(yaml, 2, /*stop_after=*/2);
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  EXPECT_EQ(first.reference_passes, (std::vector<int>{2, 2}));
  const fs::path file = EvalReferenceFile(dir + "/stop");
  ASSERT_FALSE(file.empty());
  std::vector<double> R = ReadReference(file);
  const double delta = 0.75;
  for (size_t k = 0; k < R.size(); k += 2) R[k] += delta;  // every chosen reply's reference
  WriteReference(file, R);
  const EvalRun resumed = Train(yaml, 2);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.ToString();
  EXPECT_EQ(resumed.start_step, 2);
  EXPECT_EQ(resumed.reference_passes, (std::vector<int>{0, 0})) << "a resumed attempt recomputed a reference";
  const StepMetrics& a = straight.steps.at(4);
  const StepMetrics& b = resumed.steps.at(4);
  EXPECT_EQ(b.eval_pairs, 5);
  EXPECT_EQ(b.eval_logps_chosen, a.eval_logps_chosen);
  EXPECT_EQ(b.eval_rewards_rejected, a.eval_rewards_rejected);
  EXPECT_NEAR(a.eval_rewards_chosen - b.eval_rewards_chosen, 0.5 * delta, 1e-9);
  fs::remove_all(dir);
}

// A resumed full fine-tune holds the checkpoint's weights: a reference that
// was never stored (here: eval: added on the resume) cannot be computed then.
TEST(PairEvalTest, AResumedFullFineTuneRefusesToScoreAMissingReference) {
  const std::string dir = NewDir("paireval_missing");
  WritePairs(dir + "/train.jsonl", 24, 3);
  WritePairs(dir + "/held.jsonl", 5, 99);
  const EvalRun first = Train(Job(dir, dir + "/ckpt", "preference: {method: dpo}\n"), 1, /*stop_after=*/2);
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  const EvalRun resumed = Train(Job(dir, dir + "/ckpt", "preference: {method: dpo}\n" + EvalSection(dir)), 1);
  ASSERT_FALSE(resumed.status.ok());
  EXPECT_EQ(resumed.status.code(), StatusCode::kFailedPrecondition) << resumed.status.ToString();
  EXPECT_NE(resumed.status.message().find("eval.data: its reference log-probs are not stored"), std::string::npos)
      << resumed.status.ToString();
  EXPECT_NE(resumed.status.message().find("step_00000002"), std::string::npos) << resumed.status.ToString();
  fs::remove_all(dir);
}

// Under peft: the reference is the base without the adapters and eval scores
// the policy with them: LoRA's B starts at zero, so an eval that lost the
// adapters would report zero rewards forever. A LoRA job also reloads its base
// on a resume, so a reference missing then is computed (nothing refused).
TEST(PairEvalTest, LoraEvalScoresTheAdaptersAgainstTheBase) {
  const std::string dir = NewDir("paireval_lora");
  WritePairs(dir + "/train.jsonl", 24, 3);
  WritePairs(dir + "/held.jsonl", 5, 99);
  const std::string peft =
      "peft: {method: lora, r: 4, alpha: 8, dropout: 0.1, target_modules: all-linear}\n"
      "preference: {method: dpo, beta: 0.5}\n";
  const EvalRun first = Train(Job(dir, dir + "/ckpt", peft), 2, /*stop_after=*/2);
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  const EvalRun lora = Train(Job(dir, dir + "/ckpt", peft + EvalSection(dir)), 2);
  ASSERT_TRUE(lora.status.ok()) << lora.status.ToString();
  EXPECT_EQ(lora.start_step, 2);
  EXPECT_EQ(lora.reference_passes, (std::vector<int>{1, 1})) << "the eval pairs' reference, from the reloaded base";
  const StepMetrics& m = lora.steps.at(4);
  EXPECT_EQ(m.eval_pairs, 5);
  EXPECT_GT(std::abs(m.eval_rewards_margins), 1e-4) << "eval scored the base, not the adapters";
  EXPECT_GT(std::abs(m.eval_rewards_chosen), 1e-4);
  EXPECT_NEAR(m.eval_rewards_margins, m.eval_rewards_chosen - m.eval_rewards_rejected, 1e-12);
  fs::remove_all(dir);
}

// ORPO (no reference) reports its NLL on the held-out pairs; a preference
// job's eval set must hold pairs and an SFT job's SFT samples, and exact
// match (greedy answers) is not a pair metric.
TEST(PairEvalTest, OrpoEvalReportsNllAndTheEvalSectionIsChecked) {
  const std::string dir = NewDir("paireval_orpo");
  WritePairs(dir + "/train.jsonl", 16, 3);
  WritePairs(dir + "/held.jsonl", 5, 99);
  const EvalRun orpo = Train(Job(dir, dir + "/orpo", "preference: {method: orpo}\n" + EvalSection(dir)), 1);
  ASSERT_TRUE(orpo.status.ok()) << orpo.status.ToString();
  EXPECT_EQ(orpo.reference_passes, std::vector<int>{0});
  EXPECT_TRUE(EvalReferenceFile(dir + "/orpo").empty());
  const StepMetrics& m = orpo.steps.at(4);
  EXPECT_EQ(m.eval_pairs, 5);
  EXPECT_GT(m.eval_nll, 0);
  EXPECT_NEAR(m.eval_rewards_chosen, 0.1 * m.eval_logps_chosen, 1e-12);  // orpo: beta · the average log-prob

  sft_testing::WriteReversalJsonl(dir + "/sft.jsonl", 4);
  const EvalRun sft_eval =
      Train(Job(dir, dir + "/sft", "preference: {method: dpo}\neval: {data: " + dir + "/sft.jsonl}\n"), 1);
  ASSERT_FALSE(sft_eval.status.ok());
  EXPECT_NE(sft_eval.status.message().find("holds SFT samples; a preference: job evaluates on held-out pairs"),
            std::string::npos)
      << sft_eval.status.ToString();
  const EvalRun pairs_for_sft = Train(sft_testing::SftJob(dir + "/sft.jsonl", dir + "/sft2",
                                                         "eval: {data: " + dir + "/held.jsonl}\n"),
                                     1);
  ASSERT_FALSE(pairs_for_sft.status.ok());
  EXPECT_NE(pairs_for_sft.status.message().find("holds preference pairs (prompt, chosen, rejected); an SFT job"),
            std::string::npos)
      << pairs_for_sft.status.ToString();
  auto exact = ParseJobConfig(Job(dir, dir + "/x", "preference: {method: dpo}\neval: {data: " + dir +
                                                       "/held.jsonl, exact_match: true}\n"),
                              "job.yaml");
  ASSERT_FALSE(exact.ok());
  EXPECT_NE(exact.status().message().find("eval.exact_match"), std::string::npos) << exact.status().ToString();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shard
