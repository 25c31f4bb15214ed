// The preference objective on the model (shard/train/preference_objective.h):
// its loss is the mean of TRL's pair losses on the replies' log-probs (as the
// reference pass reports them), and a step's gradient and metrics do not
// depend on how its pairs are split into micro-batches.
#include "shard/train/preference_objective.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "shard/model/init.h"
#include "shard/spec/job_config.h"
#include "shard/train/data_sources.h"
#include "shard/train/local_params.h"

namespace shard {
namespace {

LlamaConfig Config() {
  LlamaConfig c;
  c.vocab_size = 19;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 32;
  return c;
}

struct Rows {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> tokens, targets, positions;
  DeviceBatch Slice(int64_t first_row, int64_t rows) {
    return DeviceBatch{rows, seq, tokens.data() + first_row * seq, targets.data() + first_row * seq,
                       positions.data() + first_row * seq, nullptr};
  }
};

// `pairs` pairs of rows (chosen, rejected): a prompt of 2 non-targets, replies of 2..seq-2 targets.
Rows Pairs(int64_t pairs, int64_t seq, int V) {
  std::mt19937 rng(17);
  Rows r;
  r.batch = 2 * pairs;
  r.seq = seq;
  for (int64_t row = 0; row < r.batch; ++row) {
    const int64_t reply_end = 4 + static_cast<int64_t>(rng() % (seq - 4));
    for (int64_t t = 0; t < seq; ++t) {
      r.tokens.push_back(static_cast<int32_t>(rng() % V));
      r.targets.push_back(t >= 2 && t < reply_end ? static_cast<int32_t>(rng() % V) : -1);
      r.positions.push_back(static_cast<int32_t>(t));
    }
  }
  return r;
}

struct Engine {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<LocalParams> params;
  explicit Engine(int64_t max_rows, int64_t seq) {
    auto be = CreateBackend("cpu");
    EXPECT_TRUE(be.ok());
    backend = std::move(*be);
    ModelOptions mo;
    mo.max_batch = max_rows;
    mo.max_seq = seq;
    auto m = LlamaModel::Create(Config(), backend.get(), mo);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    model = std::move(*m);
    auto p = LocalParams::Create(backend.get(), model->layout(), true);
    EXPECT_TRUE(p.ok());
    params = std::move(*p);
    params->InitRandom(3, 0.3f);
    params->ZeroGrads();
  }
  std::vector<float> Grads() {
    std::vector<float> g;
    for (int u = 0; u < model->layout().num_units(); ++u)
      g.insert(g.end(), params->grads(u), params->grads(u) + model->layout().units[u].numel);
    return g;
  }
};

PreferenceConfig Method(PreferenceMethod m) {
  PreferenceConfig c;
  c.method = m;
  c.beta = 0.3;
  c.label_smoothing = m == PreferenceMethod::kDpo ? 0.05 : 0.0;
  c.orpo_lambda = 0.4;
  return c;
}

TEST(PreferenceObjective, LossIsTheMeanOfThePairLossesOnTheReplyLogProbs) {
  const int64_t P = 4, T = 9;
  Rows rows = Pairs(P, T, 19);
  for (PreferenceMethod m : {PreferenceMethod::kDpo, PreferenceMethod::kIpo, PreferenceMethod::kOrpo}) {
    const PreferenceConfig pc = Method(m);
    Engine e(2 * P, T);
    auto logps = ReplyLogps(*e.model, *e.params, rows.Slice(0, 2 * P));
    ASSERT_TRUE(logps.ok()) << logps.status().ToString();
    ASSERT_EQ(logps->size(), static_cast<size_t>(2 * P));
    std::vector<double> ref;
    for (int64_t i = 0; i < 2 * P; ++i) ref.push_back((*logps)[i] + (i % 3 == 0 ? 0.7 : -0.4));  // a reference that differs
    if (!pc.needs_reference()) ref.clear();
    PreferenceObjective obj(pc);
    obj.BeginStep(P, 1.0);
    auto loss = obj.MicroBatch(*e.model, *e.params, rows.Slice(0, 2 * P), rows.targets.data(), ref);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();
    PreferenceSums want;
    for (int64_t k = 0; k < P; ++k) {
      PairLogps p;
      p.chosen = (*logps)[2 * k];
      p.rejected = (*logps)[2 * k + 1];
      for (int64_t t = 0; t < T; ++t) {
        p.chosen_tokens += rows.targets[(2 * k) * T + t] >= 0;
        p.rejected_tokens += rows.targets[(2 * k + 1) * T + t] >= 0;
      }
      if (!ref.empty()) {
        p.ref_chosen = ref[2 * k];
        p.ref_rejected = ref[2 * k + 1];
      }
      want.Add(PreferencePairLoss(pc, p));
    }
    EXPECT_NEAR(*loss, want.loss, 1e-9 * std::abs(want.loss)) << PreferenceMethodName(m);
    const PreferenceMetrics a = MeanMetrics(obj.sums()), b = MeanMetrics(want);
    EXPECT_NEAR(a.rewards_margins, b.rewards_margins, 1e-9) << PreferenceMethodName(m);
    EXPECT_EQ(a.rewards_accuracies, b.rewards_accuracies);
    EXPECT_NEAR(a.logps_chosen, b.logps_chosen, 1e-9);
    EXPECT_NEAR(a.nll, b.nll, 1e-9);
  }
}

// Four pairs in one micro-batch, or two micro-batches of two: the same
// gradient (the factors are per pair, over the step's 4 pairs) and metrics.
TEST(PreferenceObjective, MicroBatchSplitGivesTheSameStep) {
  const int64_t P = 4, T = 9;
  Rows rows = Pairs(P, T, 19);
  for (PreferenceMethod m : {PreferenceMethod::kDpo, PreferenceMethod::kIpo, PreferenceMethod::kOrpo}) {
    const PreferenceConfig pc = Method(m);
    std::vector<double> ref;
    if (pc.needs_reference())
      for (int64_t i = 0; i < 2 * P; ++i) ref.push_back(-10.0 - i);
    Engine whole(2 * P, T), split(4, T);
    PreferenceObjective a(pc), b(pc);
    a.BeginStep(P, 4.0);
    b.BeginStep(P, 4.0);
    ASSERT_TRUE(a.MicroBatch(*whole.model, *whole.params, rows.Slice(0, 2 * P), rows.targets.data(), ref).ok());
    double lb = 0;
    for (int64_t first = 0; first < P; first += 2) {
      std::vector<double> r;
      if (!ref.empty()) r.assign(ref.begin() + 2 * first, ref.begin() + 2 * first + 4);
      auto l = b.MicroBatch(*split.model, *split.params, rows.Slice(2 * first, 4), rows.targets.data() + 2 * first * T, r);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      lb += *l;
    }
    EXPECT_NEAR(a.sums().loss, lb, 1e-9 * std::abs(lb));
    EXPECT_EQ(a.sums().pairs, b.sums().pairs);
    EXPECT_NEAR(MeanMetrics(a.sums()).rewards_chosen, MeanMetrics(b.sums()).rewards_chosen, 1e-9);
    const std::vector<float> ga = whole.Grads(), gb = split.Grads();
    double diff = 0, scale = 1e-30;
    for (size_t i = 0; i < ga.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(ga[i]) - gb[i]));
      scale = std::max(scale, std::abs(static_cast<double>(ga[i])));
    }
    EXPECT_GT(scale, 1e-6) << PreferenceMethodName(m);
    EXPECT_LT(diff / scale, 1e-5) << PreferenceMethodName(m);
  }
}

TEST(PreferenceObjective, RefusesWhatIsNotWholePairsWithTheirReference) {
  Rows rows = Pairs(2, 9, 19);
  Engine e(4, 9);
  PreferenceObjective dpo(Method(PreferenceMethod::kDpo));
  auto early = dpo.MicroBatch(*e.model, *e.params, rows.Slice(0, 4), rows.targets.data(), {1, 2, 3, 4});
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition);
  dpo.BeginStep(2, 1.0);
  auto odd = dpo.MicroBatch(*e.model, *e.params, rows.Slice(0, 3), rows.targets.data(), {1, 2, 3});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("whole pairs"), std::string::npos);
  auto noref = dpo.MicroBatch(*e.model, *e.params, rows.Slice(0, 4), rows.targets.data(), {});
  ASSERT_FALSE(noref.ok());
  EXPECT_NE(noref.status().message().find("reference log-probs"), std::string::npos);
  std::vector<int32_t> empty(rows.targets);
  for (int t = 0; t < 9; ++t) empty[9 + t] = -1;
  auto none = dpo.MicroBatch(*e.model, *e.params, rows.Slice(0, 4), empty.data(), {1, 2, 3, 4});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no target token"), std::string::npos);
}

// A preference: job's source is whole pairs (two rows an item); an SFT job
// never trains on a file of pairs.
TEST(PreferenceObjective, PairsNeverTrainAsSftSamples) {
  const auto dir = std::filesystem::temp_directory_path() / ("shardd_pref_src_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream((dir / "pairs.jsonl").string()) << R"({"prompt":"a","chosen":"b","rejected":"c"})" << "\n";
  const std::string base = "name: p\nmodel: {preset: tiny}\ndata: {jsonl: " + (dir / "pairs.jsonl").string() +
                           ", tokenizer: byte, template: plain, seq_len: 16, prepared: " + (dir / "prep").string() +
                           "}\ntrain: {global_batch: 1, micro_batch: 1}\n";
  auto sft = ParseJobConfig(base, "job.yaml");
  ASSERT_TRUE(sft.ok()) << sft.status().ToString();
  ASSERT_TRUE(EnsurePrepared(SftPrepareOptions(*sft)).ok());
  auto as_sft = OpenBatchSource(*sft, 265);
  ASSERT_FALSE(as_sft.ok());
  EXPECT_NE(as_sft.status().message().find("preference pairs"), std::string::npos) << as_sft.status().ToString();
  auto dpo = ParseJobConfig(base + "preference: {method: dpo}\n", "job.yaml");
  ASSERT_TRUE(dpo.ok()) << dpo.status().ToString();
  auto as_dpo = OpenBatchSource(*dpo, 265);
  ASSERT_TRUE(as_dpo.ok()) << as_dpo.status().ToString();
  EXPECT_EQ((*as_dpo)->rows_per_item(), 2);
  EXPECT_EQ((*as_dpo)->Fingerprint().rfind("pairs:", 0), 0u) << (*as_dpo)->Fingerprint();
  // eval: on held-out pairs (preference_eval_test.cc) leaves the training source as it is.
  auto with_eval = ParseJobConfig(base + "preference: {method: dpo}\neval: {data: " + (dir / "pairs.jsonl").string() +
                                      "}\n", "job.yaml");
  ASSERT_TRUE(with_eval.ok()) << with_eval.status().ToString();
  auto eval_source = OpenBatchSource(*with_eval, 265);
  ASSERT_TRUE(eval_source.ok()) << eval_source.status().ToString();
  EXPECT_EQ((*eval_source)->rows_per_item(), 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shard
