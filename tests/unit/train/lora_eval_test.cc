// SFT eval under peft: (LoRA, QLoRA) scores the adapted model, not the frozen
// base. The trainer's eval: loss and greedy exact match, at 1 and 2 ranks,
// equal an independent scoring of the merged export (W + s·B·A: the
// dequantised NF4 base for QLoRA) and differ from the base's scoring. And
// EvaluateSft given an adapter binding (dropout set, never applied) gives the
// merged weights' loss and the same greedy tokens, while the base's differ.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <random>

#include "shard/data/prepare_sft.h"
#include "shard/data/prepared_dataset.h"
#include "shard/model/init.h"
#include "shard/train/local_params.h"
#include "shard/train/batch_source.h"
#include "shard/train/lora_adapters.h"
#include "shard/train/sft_eval.h"
#include "tests/unit/train/sft_test_util.h"

namespace shard {
namespace {

using namespace sft_testing;

// The eval options the trainer uses for SftJob (seq_len 32, micro_batch 4).
SftEvalOptions JobEvalOptions() {
  SftEvalOptions o;
  o.seq_len = 32;
  o.batch = 4;
  o.keep_answers = 1000;
  return o;
}

// Scores `data` with the weights of the HF folder `dir`, alone, on one rank.
SftEvalResult ScoreFolder(const std::string& dir, const PreparedDataset& data) {
  auto m = LoadModelForInference(dir, "cpu");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  auto r = EvaluateSft(m->config, m->backend.get(), *m->params, data, JobEvalOptions());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : SftEvalResult{};
}

struct Case {
  std::string method;
  int world;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.method << " at " << c.world << " rank(s)"; }

class PeftSftEval : public ::testing::TestWithParam<Case> {};

// Fails without the fix: the trainer's eval scored the base (its loss was the
// base's to the last digit; the merged model's differs by far more than 1e-5).
TEST_P(PeftSftEval, TrainerEvalScoresTheAdaptedModelNotTheBase) {
  const Case c = GetParam();
  const std::string dir = NewDir("peft_eval_" + c.method + std::to_string(c.world));
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 24);
  const std::string held = WriteReversalJsonl(dir + "/eval.jsonl", 7, /*seed=*/99);
  const std::string yaml =
      SftJob(train, dir + "/ckpt",
             "eval: {data: " + held + ", every_steps: 0, exact_match: true}\n"
             "peft: {method: " + c.method + ", r: 4, alpha: 8, dropout: 0.1, target_modules: all-linear}\n"
             "export: {hf_dir: " + dir + "/merged, merge: true, dtype: fp32}\n");
  const std::vector<std::string> sets = {"train.lr=3.0e-2", "train.precision=fp32", "checkpoint.resume=none",
                                         "parallel.world_size=" + std::to_string(c.world)};
  StepMetrics last;
  std::vector<Status> status(c.world);
  const Status created = testing_ranks::OnTrainerRanks(yaml, c.world, sets, [&](Trainer& t, int r) {
    status[r] = t.Run([&](const StepMetrics& m) {
      if (r == 0) last = m;
    });
  });
  ASSERT_TRUE(created.ok()) << created.ToString();
  for (const Status& s : status) ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(last.step, 6);
  ASSERT_EQ(last.eval_samples, 7);

  // The base: a fresh trainer's merged export (B = 0; QLoRA: the dequantised NF4 base).
  auto job = ParseJobConfig(yaml, "job.yaml", {"train.precision=fp32", "checkpoint.resume=none"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  {
    auto fresh = Trainer::Create(*job);
    ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
    ASSERT_TRUE((*fresh)->ExportHf(dir + "/base", DType::kF32).ok());
  }
  auto data = PreparedDataset::Open(EvalPreparedPrefix(*job));
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  const SftEvalResult merged = ScoreFolder(dir + "/merged", *data);
  const SftEvalResult base = ScoreFolder(dir + "/base", *data);
  std::printf("[ measured ] %s, %d rank(s): eval_loss %.6f, merged %.6f, base %.6f; exact match %.3f (merged %.3f)\n",
              c.method.c_str(), c.world, last.eval_loss, merged.loss, base.loss, last.eval_exact_match,
              merged.exact_match());
  EXPECT_NEAR(last.eval_loss, merged.loss, 1e-5 * merged.loss) << "eval must score the adapted model";
  EXPECT_GT(std::fabs(merged.loss - base.loss), 1e-3 * base.loss) << "the adapters did not move";
  EXPECT_EQ(last.eval_exact_match, merged.exact_match());
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(MethodsAndRanks, PeftSftEval,
                         ::testing::Values(Case{"lora", 1}, Case{"lora", 2}, Case{"qlora", 1}, Case{"qlora", 2}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return i.param.method + "_" + std::to_string(i.param.world) + "rank";
                         });

// Greedy decoding through the adapters: with large random adapters bound (and
// a dropout that must not apply), every greedy token and the loss are those
// of the merged weights; the base's answers differ.
TEST(PeftSftEvalUnit, GreedyAnswersAndLossAreTheMergedWeights) {
  const std::string dir = NewDir("peft_eval_unit");
  const std::string held = WriteReversalJsonl(dir + "/eval.jsonl", 9, /*seed=*/5);
  auto job = ParseJobConfig(SftJob(held, dir + "/ckpt", "eval: {data: " + held + "}\n"), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  PrepareSftOptions po = SftPrepareOptions(*job);
  po.out = dir + "/prepared";
  ASSERT_TRUE(EnsurePrepared(po).ok());
  auto data = PreparedDataset::Open(po.out);
  ASSERT_TRUE(data.ok()) << data.status().ToString();

  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  const LlamaConfig config = *LlamaPreset("tiny");
  const ParamLayout layout = ParamLayout::ForLlama(config);
  auto base = LocalParams::Create(backend->get(), layout, false);
  ASSERT_TRUE(base.ok());
  (*base)->InitRandom(11, 0.02f);
  PeftConfig peft;
  peft.method = PeftMethod::kLora;
  peft.r = 4;
  peft.alpha = 8;
  peft.dropout = 0.5;
  peft.target_modules = {LoraTarget::kQ, LoraTarget::kV, LoraTarget::kDown};
  auto adapters = LoraAdapters::Create(backend->get(), config, peft, 3);
  ASSERT_TRUE(adapters.ok()) << adapters.status().ToString();
  const LoraLayout& ll = (*adapters)->layout();
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  std::vector<std::vector<float>> merged_units(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) (*base)->CopyUnitToHost(u, &merged_units[u]);
  for (int l = 0; l < config.num_layers; ++l) {
    std::vector<float> layer(ll.layer_numel);
    for (float& x : layer) x = nd(rng);
    (*adapters)->WriteLayer(l, layer.data());
    const int u = layout.block_unit(l);
    MergeLoraLayer(ll, layout.units[u], (*adapters)->binding()->scale, layer.data(), merged_units[u].data());
  }
  auto merged = LocalParams::Create(backend->get(), layout, false);
  ASSERT_TRUE(merged.ok());
  ASSERT_TRUE((*merged)->LoadUnits(merged_units).ok());

  SftEvalOptions o = JobEvalOptions();
  auto plain = EvaluateSft(config, backend->get(), **base, *data, o);
  auto want = EvaluateSft(config, backend->get(), **merged, *data, o);
  o.lora = (*adapters)->binding();
  auto got = EvaluateSft(config, backend->get(), **base, *data, o);
  ASSERT_TRUE(plain.ok() && want.ok() && got.ok()) << got.status().ToString();
  EXPECT_NEAR(got->loss, want->loss, 1e-5 * want->loss);
  EXPECT_GT(std::fabs(want->loss - plain->loss), 1e-3 * plain->loss);
  ASSERT_EQ(got->answers.size(), want->answers.size());
  int differ_from_base = 0;
  for (size_t i = 0; i < got->answers.size(); ++i) {
    EXPECT_EQ(got->answers[i].greedy, want->answers[i].greedy) << "sample " << got->answers[i].sample;
    differ_from_base += got->answers[i].greedy != plain->answers[i].greedy;
  }
  EXPECT_GT(differ_from_base, 0);
  EXPECT_EQ(got->exact, want->exact);
  std::printf("[ measured ] bound %.6f, merged %.6f, base %.6f; greedy answers differing from the base's: %d of %zu\n",
              got->loss, want->loss, plain->loss, differ_from_base, got->answers.size());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shard
