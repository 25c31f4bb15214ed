// Evaluation during training (job file eval:): the held-out loss and greedy
// exact match are computed by the ranks together and land in the step's
// metrics at every eval.every_steps and the last step; two ranks (7 samples:
// one rank runs placeholder passes) give what one rank gives, and both equal
// a standalone EvaluateSft of the final weights. The eval section's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "shard/data/prepared_dataset.h"
#include "shard/train/sft_eval.h"
#include "tests/unit/train/sft_test_util.h"

namespace shard {
namespace {

using namespace sft_testing;

struct EvalRun {
  Status status;
  std::map<int64_t, StepMetrics> metrics;  // rank 0's, by step
  std::vector<std::vector<float>> params;  // final weights
};

EvalRun RunWithEval(const std::string& yaml, int world) {
  EvalRun out;
  std::vector<Status> status(world);
  std::mutex mu;
  out.status = testing_ranks::OnTrainerRanks(yaml, world, {"parallel.world_size=" + std::to_string(world)},
                                             [&](Trainer& t, int r) {
    status[r] = t.Run([&](const StepMetrics& m) {
      if (r != 0) return;
      std::lock_guard<std::mutex> lock(mu);
      out.metrics[m.step] = m;
    });
    std::vector<std::vector<float>> params(t.layout().num_units());
    for (int u = 0; u < t.layout().num_units() && status[r].ok(); ++u) status[r] = t.UnitParams(u, &params[u]);
    if (r == 0) out.params = std::move(params);
  });
  for (const Status& s : status)
    if (!s.ok() && out.status.ok()) out.status = s;
  return out;
}

TEST(EvalDuringTrainingTest, RanksScoreTogetherAndMatchAStandaloneEvaluation) {
  const std::string dir = NewDir("evaltrain");
  const std::string train = WriteReversalJsonl(dir + "/train.jsonl", 24);
  const std::string held = WriteReversalJsonl(dir + "/eval.jsonl", 7, /*seed=*/99);
  auto yaml = [&](const std::string& sub) {
    return SftJob(train, dir + "/" + sub,
                  "eval: {data: " + held + ", every_steps: 2, exact_match: true}\n");
  };
  const EvalRun one = RunWithEval(yaml("w1"), 1);
  ASSERT_TRUE(one.status.ok()) << one.status.ToString();
  const EvalRun two = RunWithEval(yaml("w2"), 2);
  ASSERT_TRUE(two.status.ok()) << two.status.ToString();
  ASSERT_EQ(one.metrics.size(), 6u);
  for (const auto& [step, m] : two.metrics) {
    const StepMetrics& m1 = one.metrics.at(step);
    if (step % 2 != 0) {
      EXPECT_EQ(m.eval_samples, 0) << step;
      continue;
    }
    EXPECT_EQ(m.eval_samples, 7) << step;
    EXPECT_GT(m.eval_loss, 0) << step;
    EXPECT_NEAR(m.eval_loss, m1.eval_loss, 1e-4 * m1.eval_loss) << "step " << step << ": 2 ranks vs 1";
    EXPECT_EQ(m.eval_exact_match, m1.eval_exact_match) << step;
    EXPECT_GE(m.eval_exact_match, 0.0);
    std::printf("[ measured ] step %lld: eval_loss %.5f (1 rank) %.5f (2 ranks), exact match %.3f\n",
                static_cast<long long>(step), m1.eval_loss, m.eval_loss, m.eval_exact_match);
  }
  EXPECT_LT(one.metrics.at(6).eval_loss, one.metrics.at(2).eval_loss) << "the held-out loss falls";

  // The last evaluation equals scoring the final weights alone.
  auto job = ParseJobConfig(yaml("w1"), "job.yaml");
  ASSERT_TRUE(job.ok());
  auto data = PreparedDataset::Open(EvalPreparedPrefix(*job));
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  const LlamaConfig c = *LlamaPreset("tiny");
  auto params = LocalParams::Create(backend->get(), ParamLayout::ForLlama(c), false);
  ASSERT_TRUE(params.ok());
  ASSERT_TRUE((*params)->LoadUnits(one.params).ok());
  SftEvalOptions o;
  o.seq_len = 32;
  o.batch = 4;
  auto alone = EvaluateSft(c, backend->get(), **params, *data, o);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_NEAR(alone->loss, one.metrics.at(6).eval_loss, 1e-6 * alone->loss);
  EXPECT_EQ(alone->exact_match(), one.metrics.at(6).eval_exact_match);
  fs::remove_all(dir);
}

TEST(EvalDuringTrainingTest, TheEvalSectionIsChecked) {
  const std::string base = SftJob("rows.jsonl", "ckpt");
  auto err = [&](const std::string& eval) {
    auto j = ParseJobConfig(base + eval, "job.yaml");
    return j.ok() ? std::string("ok") : j.status().message();
  };
  EXPECT_EQ(err("eval: {data: held.jsonl, every_steps: 5, max_samples: 10, exact_match: true}\n"), "ok");
  EXPECT_NE(err("eval: {data: held.jsonl, every_steps: -1}\n").find("eval.every_steps must be >= 0"), std::string::npos);
  EXPECT_NE(err("eval: {every_steps: 5}\n").find("set eval.data"), std::string::npos);
  EXPECT_NE(err("eval: {data: held.jsonl, steps: 5}\n").find("eval.steps"), std::string::npos);
  auto tokens = ParseJobConfig(
      "name: t\nmodel: {preset: tiny}\ndata: {tokens: x.u32, seq_len: 32}\neval: {data: held.jsonl}\n", "job.yaml");
  ASSERT_FALSE(tokens.ok());
  EXPECT_NE(tokens.status().message().find("eval.data needs an SFT job"), std::string::npos) << tokens.status().ToString();
}

}  // namespace
}  // namespace shard
