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

#include "shard/train/model_converter.h"
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
// Hex floats, exact; compared to 1e-6 relative so another CPU's fp32
// summation order passes while a change of storage (NF4 or not, the frozen
// dtype) does not.
constexpr double kExpectedLosses[] = {0x1.92689f5a2721fp+2, 0x1.8ddc755b29091p+2, 0x1.8b8295b23a24bp+2,
                                      0x1.848bdf7d13196p+2};

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
    EXPECT_NEAR(losses[i], kExpectedLosses[i], 1e-6 * std::fabs(kExpectedLosses[i])) << "step " << i + 1;
  }
}

// The converters set the runtime's storage, in order; NF4 without a frozen
// base is refused with a line that says why.
TEST(ModelConverter, ConvertersSetTheStorageInOrder) {
  auto config = LlamaPreset("tiny");
  ASSERT_TRUE(config.ok());
  const ParamLayout layout = ParamLayout::ForLlama(*config);
  FsdpOptions o;
  o.param_dtype = DType::kBF16;
  o.param_shard_dtype = DType::kF32;
  std::vector<std::unique_ptr<ModelConverter>> lora_only;
  lora_only.push_back(FreezeConverter());
  ASSERT_TRUE(ApplyConverters(lora_only, layout, &o).ok());
  EXPECT_TRUE(o.frozen);
  EXPECT_EQ(o.param_shard_dtype, DType::kBF16);  // no fp32 master for a frozen base
  EXPECT_TRUE(o.nf4_units.empty());

  FsdpOptions not_frozen;
  std::vector<std::unique_ptr<ModelConverter>> nf4_only;
  nf4_only.push_back(Nf4Converter(64, false));
  Status st = ApplyConverters(nf4_only, layout, &not_frozen);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.ToString().find("model converter nf4"), std::string::npos) << st.ToString();
  EXPECT_NE(st.ToString().find("frozen base"), std::string::npos) << st.ToString();

  auto job = ParseJobConfig(QloraJob("unused.bin"), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const auto qlora = ModelConvertersFor(*job);
  ASSERT_EQ(qlora.size(), 2u);
  EXPECT_EQ(qlora[0]->name(), "freeze");
  EXPECT_EQ(qlora[1]->name(), "nf4");
  FsdpOptions q;
  ASSERT_TRUE(ApplyConverters(qlora, layout, &q).ok());
  ASSERT_EQ(q.nf4_units.size(), layout.units.size());
  for (size_t u = 0; u < layout.units.size(); ++u)
    EXPECT_EQ(q.nf4_units[u].quantize, layout.units[u].kind == UnitKind::kBlock) << "unit " << u;
}

}  // namespace
}  // namespace shard
