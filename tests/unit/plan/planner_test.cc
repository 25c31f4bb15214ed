// Verdicts and recommendations for the shipped job files and for jobs built
// to fail in one specific way; JSON and text reports; model.from_hf planned
// from config.json alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "tests/unit/plan/catalog_fixture.h"

namespace shard::plan {
namespace {

using testing_catalog::Catalog;
using testing_catalog::Root;

Plan PlanFile(const std::string& file, const std::string& cluster, const std::vector<std::string>& sets = {}) {
  auto job = LoadJobConfig(Root() + "/configs/jobs/" + file, sets);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  // A relative model.from_hf is the repository's (the 70B recipe's config.json); tests run in the build dir.
  if (job.ok() && !job->model.from_hf.empty() && job->model.from_hf[0] != '/')
    job->model.from_hf = Root() + "/" + job->model.from_hf;
  auto p = PlanJob(*job, Catalog(), cluster);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : Plan{};
}

bool HasSet(const Recommendation& r, const std::string& s) {
  return std::find(r.sets.begin(), r.sets.end(), s) != r.sets.end();
}

TEST(PlannerTest, Llama70bFitsOnEightA100sWithOffloadAndCheckpointing) {
  Plan p = PlanFile("llama3-70b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM");
  EXPECT_TRUE(p.ok()) << FormatPlanText(p);
  EXPECT_EQ(p.workload.compute, DType::kBF16);
  EXPECT_LT(p.memory.device_total, 80.0 * (1 << 30));
  EXPECT_GT(p.memory.host_total, 1024.0 * (1 << 30)) << "1.13 TB of optimizer state lives on the host";
  EXPECT_GT(p.time.mfu, 0.3);
  EXPECT_LT(p.time.mfu, 0.72);
  // Planned as the runtime is built (fp32 transients), and the note says so.
  EXPECT_TRUE(p.workload.fp32_transients);
  bool noted = false;
  for (const auto& n : p.notes) noted |= n.find("as built") != std::string::npos;
  EXPECT_TRUE(noted) << FormatPlanText(p);
}

TEST(PlannerTest, Llama70bWithoutOffloadDoesNotFitAndOffloadIsRecommended) {
  Plan p = PlanFile("llama3-70b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM", {"parallel.offload_optimizer=false"});
  EXPECT_EQ(p.verdict, Verdict::kDoesNotFit);
  // 16 B x 70.6B / 8 = 132 GiB of state per GPU alone.
  EXPECT_GT(p.memory.device_total, 130.0 * (1 << 30));
  ASSERT_FALSE(p.recommendations.empty());
  EXPECT_TRUE(HasSet(p.recommendations.front(), "parallel.offload_optimizer=true")) << FormatPlanText(p);
  EXPECT_NE(PlanSummary(p).find("exceeds the 80 GiB"), std::string::npos) << PlanSummary(p);
}

TEST(PlannerTest, OneTerabyteHostIsNotEnoughForFullOptimizerOffload) {
  Plan p = PlanFile("llama3-70b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM-1TB");
  EXPECT_EQ(p.verdict, Verdict::kDoesNotFit);
  ASSERT_EQ(p.reasons.size(), 1u);
  EXPECT_NE(p.reasons[0].find("host memory"), std::string::npos);
  // First the fix on this hardware (bf16 optimizer state, optim.state_dtype:
  // bf16); then the same GPUs with 2 TB of host memory come first among the moves.
  ASSERT_GE(p.recommendations.size(), 2u);
  EXPECT_TRUE(p.recommendations[0].supported) << FormatPlanText(p);
  EXPECT_TRUE(HasSet(p.recommendations[0], "optim.state_dtype=bf16")) << FormatPlanText(p);
  EXPECT_EQ(p.recommendations[1].cluster, "8xA100-80GB-SXM") << FormatPlanText(p);
}

TEST(PlannerTest, AsyncSnapshotIsCountedOnTheHost) {
  Plan sync = PlanFile("llama3-70b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM");
  Plan async = PlanFile("llama3-70b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM", {"checkpoint.async=true"});
  // 8 writers x 8.82e9 shard elements x 12 B (fp32 params, m, v); a
  // synchronous save of offloaded state writes in place (no snapshot), so
  // sync counts only the loading buffer (8 ranks x the 131,334,144-element
  // embedding shard x 4 B), which the snapshot covers under async.
  EXPECT_NEAR(static_cast<double>(async.memory.host_total - sync.memory.host_total),
              8 * 8819213312.0 * 12 - 8 * 131334144.0 * 4, 1e6);
  EXPECT_EQ(async.verdict, Verdict::kDoesNotFit);
  ASSERT_FALSE(async.recommendations.empty());
  EXPECT_TRUE(HasSet(async.recommendations.front(), "checkpoint.async=false"));
}

TEST(PlannerTest, SingleGpuJobsFit) {
  Plan a100 = PlanFile("llama3-8b-sft-1xa100-40gb.yaml", "1xA100-40GB-PCIe");
  EXPECT_TRUE(a100.ok()) << FormatPlanText(a100);
  Plan v100 = PlanFile("llama2-7b-sft-1xv100-32gb.yaml", "1xV100-32GB");
  EXPECT_TRUE(v100.ok()) << FormatPlanText(v100);
  EXPECT_EQ(v100.workload.compute, DType::kF16);
  // Without offload 8B needs 16 B x 8.03e9 = 120 GiB on one 40 GB GPU.
  Plan no = PlanFile("llama3-8b-sft-1xa100-40gb.yaml", "1xA100-40GB-PCIe", {"parallel.offload_optimizer=false"});
  EXPECT_EQ(no.verdict, Verdict::kDoesNotFit);
}

TEST(PlannerTest, Bf16OnVoltaCannotRunAndFp16IsRecommended) {
  Plan p = PlanFile("llama2-7b-sft-1xv100-32gb.yaml", "1xV100-32GB", {"train.precision=bf16"});
  EXPECT_EQ(p.verdict, Verdict::kCannotRun);
  ASSERT_FALSE(p.reasons.empty());
  EXPECT_NE(p.reasons[0].find("no bf16"), std::string::npos);
  ASSERT_FALSE(p.recommendations.empty());
  EXPECT_TRUE(HasSet(p.recommendations.front(), "train.precision=fp16")) << FormatPlanText(p);
  // auto picks fp16 there.
  Plan a = PlanFile("llama2-7b-sft-1xv100-32gb.yaml", "1xV100-32GB", {"train.precision=auto"});
  EXPECT_EQ(a.workload.compute, DType::kF16);
}

// 70B on four 24 GB cards: full fine-tuning cannot fit, nor can LoRA's bf16
// base (33 GiB per GPU). QLoRA is priced as the runtime runs it: its NF4
// blocks decoded straight into a bf16 compute copy (issue 19 item 2c; with
// the fp32 copy it landed just under 24 GiB, too close to offer), fp32
// backward scratch: about 20.8 GiB at 2048 tokens, which fits; the design
// point (every transient in bf16) is lower still.
TEST(PlannerTest, Llama70bOnFourRtx4090sPricesQloraAsBuilt) {
  Plan p = PlanFile("llama2-70b-sft-4xrtx4090.yaml", "4xRTX4090");
  EXPECT_EQ(p.verdict, Verdict::kDoesNotFit);
  for (const auto& r : p.recommendations) {
    if (r.change.find("LoRA") == std::string::npos) continue;
    EXPECT_TRUE(r.cluster.empty()) << "adapters are offered on the user's own GPUs";
    EXPECT_LE(r.device_bytes, 24.0 * (1 << 30)) << FormatPlanText(p);
  }
  Plan q = PlanFile("llama2-70b-sft-4xrtx4090.yaml", "4xRTX4090",
                    {"peft.method=qlora", "peft.r=16", "peft.target_modules=all-linear", "peft.double_quant=true"});
  EXPECT_EQ(q.workload.method, Method::kQlora);
  EXPECT_GT(q.memory.device_total, 19.0 * (1 << 30)) << FormatPlanText(q);
  EXPECT_LT(q.memory.device_total, 22.0 * (1 << 30)) << FormatPlanText(q);
  EXPECT_EQ(q.verdict, Verdict::kFits) << FormatPlanText(q);
  Workload design = q.workload;
  design.fp32_transients = false;
  EXPECT_LT(EstimateMemory(design, q.cluster).device_total, q.memory.device_total);
  Plan l = PlanFile("llama2-70b-sft-4xrtx4090.yaml", "4xRTX4090", {"peft.method=lora"});
  EXPECT_GT(l.memory.device_total, 32.0 * (1 << 30)) << "the bf16 base alone is 32 GiB per GPU";
}

TEST(PlannerTest, TooManyRanksForTheCluster) {
  Plan p = PlanFile("llama3-70b-sft-8xa100-80gb.yaml", "4xRTX4090");
  EXPECT_EQ(p.verdict, Verdict::kCannotRun);
  EXPECT_NE(p.reasons[0].find("needs 8 GPUs"), std::string::npos);
}

TEST(PlannerTest, CpuJobPlansForThisHost) {
  Plan p = PlanFile("tiny-cpu.yaml", "");
  EXPECT_TRUE(p.ok()) << FormatPlanText(p);
  EXPECT_TRUE(p.cluster.cpu_only);
  EXPECT_EQ(p.workload.compute, DType::kF32);
  EXPECT_EQ(p.memory.ranks_per_node, 2);
  // The CPU engine runs bf16 as storage and wire format (mixed precision).
  Plan bf = PlanFile("tiny-cpu.yaml", "", {"train.precision=bf16"});
  EXPECT_NE(bf.verdict, Verdict::kCannotRun) << FormatPlanText(bf);
  EXPECT_EQ(bf.workload.compute, DType::kBF16);
  // --cluster contradicts resources.device: cpu.
  auto job = LoadJobConfig(Root() + "/configs/jobs/tiny-cpu.yaml");
  ASSERT_TRUE(job.ok());
  auto bad = PlanJob(*job, Catalog(), "8xA100-80GB-SXM");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(PlannerTest, CudaJobWithoutClusterNamesTheChoices) {
  auto job = LoadJobConfig(Root() + "/configs/jobs/llama3-8b-sft-1xa100-40gb.yaml");
  ASSERT_TRUE(job.ok());
  auto p = PlanJob(*job, Catalog(), "");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--cluster"), std::string::npos);
  EXPECT_NE(p.status().message().find("8xA100-80GB-SXM"), std::string::npos);
  auto unknown = PlanJob(*job, Catalog(), "8xTPU");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
}

TEST(PlannerTest, EveryShippedJobFilePlansOnSomeCluster) {
  const std::map<std::string, std::string> cluster = {
      {"llama3-70b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM"},
      {"llama3-8b-sft-1xa100-40gb.yaml", "1xA100-40GB-PCIe"},
      {"llama2-7b-sft-1xv100-32gb.yaml", "1xV100-32GB"},
      {"llama2-70b-sft-4xrtx4090.yaml", "4xRTX4090"},
      {"qwen2.5-0.5b-sft-from-hf.yaml", "1xA10G"},
      {"llama3.2-1b-sft-from-hf.yaml", "1xA100-40GB-PCIe"},
      {"llama3-70b-lora-8xa100-80gb.yaml", "8xA100-80GB-SXM"},
      {"llama3-70b-qlora-2xa100-80gb.yaml", "2xA100-80GB-SXM"},
      {"llama3-70b-dpo-lora-8xa100-80gb.yaml", "8xA100-80GB-SXM"},
      {"llama3-8b-dpo-full-8xa100-80gb.yaml", "8xA100-80GB-SXM"},
      {"qwen3-30b-a3b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM"},
      {"qwen3-30b-a3b-lora-8xa100-80gb.yaml", "8xA100-80GB-SXM"},
      {"mixtral-8x7b-qlora-2xa100-80gb.yaml", "2xA100-80GB-SXM"},
      {"qwen1.5-moe-a2.7b-lora-2xa100-80gb.yaml", "2xA100-80GB-SXM"},
  };
  // The from_hf recipes name a downloaded folder the repository does not ship:
  // they are planned with the preset of the same published shape.
  const std::map<std::string, std::string> preset_for = {{"qwen2.5-0.5b-sft-from-hf.yaml", "qwen2.5-0.5b"},
                                                         {"llama3.2-1b-sft-from-hf.yaml", "llama3.2-1b"},
                                                         // the LoRA demo adapts the SFT demo's export (preset tiny)
                                                         {"tiny-lora-cpu.yaml", "tiny"},
                                                         {"tiny-qlora-cpu.yaml", "tiny"},
                                                         // the DPO demo starts from the same export
                                                         {"tiny-dpo-cpu.yaml", "tiny"}};
  for (const auto& e : std::filesystem::directory_iterator(Root() + "/configs/jobs")) {
    const std::string name = e.path().filename().string();
    auto job = LoadJobConfig(e.path().string());
    ASSERT_TRUE(job.ok()) << name << ": " << job.status().ToString();
    if (auto pf = preset_for.find(name); pf != preset_for.end()) {
      job->model.from_hf.clear();
      job->model.preset = pf->second;
    }
    if (!job->model.from_hf.empty() && job->model.from_hf[0] != '/') job->model.from_hf = Root() + "/" + job->model.from_hf;
    auto it = cluster.find(name);
    std::string c = it == cluster.end() ? "" : it->second;
    if (c.empty() && !job->resources.device.is_cpu() && !job->resources.device.is_auto()) continue;  // another engineer's GPU job
    auto p = PlanJob(*job, Catalog(), c);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    EXPECT_EQ(p->ok(), name != "llama2-70b-sft-4xrtx4090.yaml") << name << "\n" << FormatPlanText(*p);
  }
}

TEST(PlannerTest, FastSettingsAreSuggestedOnlyWithHeadroom) {
  Plan p = PlanFile("llama3-70b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM");
  for (const auto& r : p.recommendations) {
    EXPECT_EQ(r.verdict, Verdict::kFits) << r.change;
    EXPECT_GT(r.tokens_per_s, p.time.tokens_per_s);
  }
}

TEST(PlannerTest, JsonReport) {
  Plan p = PlanFile("llama3-70b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM");
  auto j = nlohmann::json::parse(PlanToJson(p));
  EXPECT_EQ(j["verdict"], "fits");
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["cluster"]["name"], "8xA100-80GB-SXM");
  EXPECT_EQ(j["workload"]["world_size"], 8);
  EXPECT_EQ(j["memory"]["device_total_bytes"].get<int64_t>(), p.memory.device_total);
  int64_t sum = 0;
  for (const auto& i : j["memory"]["device"]) sum += i["bytes"].get<int64_t>();
  EXPECT_EQ(sum, p.memory.device_total);
  EXPECT_GT(j["time"]["tokens_per_s"].get<double>(), 0);
  EXPECT_TRUE(j["recommendations"].is_array());
}

TEST(PlannerTest, TextReportNamesTheNumbers) {
  Plan p = PlanFile("llama3-70b-sft-8xa100-80gb.yaml", "8xA100-80GB-SXM", {"parallel.offload_optimizer=false"});
  std::string t = FormatPlanText(p);
  for (const char* s : {"Per GPU", "Per host", "AdamW moments", "activations", "Verdict: does not fit", "MFU",
                        "What would fit", "--set parallel.offload_optimizer=true"})
    EXPECT_NE(t.find(s), std::string::npos) << s << "\n" << t;
}

TEST(PlannerTest, FromHfReadsOnlyConfigJson) {
  std::string dir = testing::TempDir() + "/plan_hf";
  std::filesystem::create_directories(dir);
  LlamaConfig c = *LlamaPreset("llama2-7b");
  std::ofstream(dir + "/config.json") << c.ToHfConfigJson();  // no weights at all
  std::string yaml = "name: t\nmodel: {from_hf: " + dir +
                     "}\ndata: {tokens: /nonexistent.u32, seq_len: 2048}\n"
                     "train: {global_batch: 8, micro_batch: 1}\n"
                     "parallel: {world_size: 8, activation_checkpointing: true}\nresources: {device: cuda}\n";
  auto job = ParseJobConfig(yaml, "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto p = PlanJob(*job, Catalog(), "8xA100-80GB-SXM");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->workload.model.NumParams(), c.NumParams());
  EXPECT_TRUE(p->workload.from_hf);
  EXPECT_TRUE(p->ok());
}

}  // namespace
}  // namespace shard::plan
