// LoRA through the trainer (peft: method lora): the base stays bit-for-bit
// frozen and holds no gradient or optimizer state, the adapters learn, and
// ranks as threads (full_shard, shard_grad_op, no_shard; with activation
// checkpointing) train the same adapters as one rank. A missing adapter
// folder is refused by name. (QLoRA: qlora_train_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "shard/ckpt/peft_adapter.h"
#include "shard/ckpt/safetensors.h"
#include "shard/model/hf_io.h"
#include "shard/model/init.h"
#include "shard/train/peft_inference.h"
#include "shard/train/trainer.h"
#include "tests/unit/train/lora_test_util.h"
#include "tests/unit/train/phrase_tokens.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

using lora_testing::AdapterLayers;
using lora_testing::MaxRelDiff;

std::string MakeTokens(const std::string& name, int n, int vocab) {
  return testing_tokens::MakePhraseTokens(name, n, vocab);
}

std::string Job(const std::string& tokens, int world, const std::string& extra) {
  return "name: lora\nmodel: {preset: tiny}\ndata: {tokens: " + tokens +
         ", seq_len: 32}\ntrain: {steps: 12, global_batch: 8, micro_batch: 2, lr: 1.0e-2, warmup_steps: 2, "
         "weight_decay: 0.01, log_every: 1000}\nparallel: {world_size: " +
         std::to_string(world) +
         "}\ncheckpoint: {dir: " + testing::TempDir() + "/lora_ckpt, resume: none}\nresources: {device: cpu}\n"
         "peft: {method: lora, r: 4, alpha: 8, dropout: 0.1, target_modules: all-linear}\n" +
         extra;
}

struct RunOut {
  std::vector<double> losses;
  std::vector<std::vector<float>> adapters;  // per layer
  bool base_unchanged = true;
  int64_t grad_bytes = -1, moment_bytes = -1, param_bytes = -1;
};

RunOut Train(const std::string& tokens, int world, const std::vector<std::string>& sets) {
  std::vector<RunOut> outs(world);
  const Status created = testing_ranks::OnTrainerRanks(Job(tokens, world, ""), world, sets, [&](Trainer& tr, int r) {
    ASSERT_NE(tr.lora(), nullptr);
    RunOut& o = outs[r];
    o.grad_bytes = tr.runtime().grad_shard_device_bytes();
    o.moment_bytes = tr.runtime().moment_device_bytes();
    o.param_bytes = tr.runtime().param_shard_device_bytes();
    // The frozen shards in the compute dtype (two-byte under bf16), as bytes.
    std::vector<std::vector<uint8_t>> before(tr.runtime().num_units());
    for (int u = 0; u < tr.runtime().num_units(); ++u) {
      const int64_t n = tr.runtime().layout(u).shard_numel * DTypeSize(tr.runtime().param_shard_dtype());
      const auto* p = reinterpret_cast<const uint8_t*>(tr.runtime().param_shard(u));  // CPU: host memory
      before[u].assign(p, p + n);
    }
    ASSERT_TRUE(tr.Run([&](const StepMetrics& m) { o.losses.push_back(m.loss); }).ok());
    for (int u = 0; u < tr.runtime().num_units(); ++u)
      if (std::memcmp(before[u].data(), tr.runtime().param_shard(u), before[u].size()) != 0) o.base_unchanged = false;
    const LoraLayout& ll = tr.lora()->layout();
    for (int l = 0; l < ll.num_layers; ++l) {
      o.adapters.emplace_back(ll.layer_numel);
      tr.lora()->ReadLayer(l, o.adapters.back().data());
    }
  });
  EXPECT_TRUE(created.ok()) << created.ToString();
  for (int r = 1; r < world; ++r) EXPECT_EQ(outs[r].adapters, outs[0].adapters) << "rank " << r << " drifted";
  return outs[0];
}

TEST(LoraTrain, AdaptersLearnOnAFrozenBase) {
  const std::string tokens = MakeTokens("lora_learn", 20000, 512);
  RunOut one = Train(tokens, 1, {"train.steps=40"});
  ASSERT_EQ(one.losses.size(), 40u);
  EXPECT_TRUE(one.base_unchanged);
  EXPECT_EQ(one.grad_bytes, 0);
  EXPECT_EQ(one.moment_bytes, 0);
  EXPECT_LT(one.losses.back(), one.losses.front() - 0.5) << "first " << one.losses.front() << " last "
                                                          << one.losses.back();
}

TEST(LoraTrain, TwoRanksMatchOneAcrossStrategies) {
  const std::string tokens = MakeTokens("lora_ranks", 8000, 512);
  RunOut one = Train(tokens, 1, {});
  for (const char* strategy : {"full_shard", "shard_grad_op", "no_shard"}) {
    for (bool ckpt : {false, true}) {
      SCOPED_TRACE(std::string(strategy) + (ckpt ? " + activation checkpointing" : ""));
      RunOut two = Train(tokens, 2,
                         {std::string("parallel.strategy=") + strategy,
                          std::string("parallel.activation_checkpointing=") + (ckpt ? "true" : "false")});
      EXPECT_TRUE(two.base_unchanged);
      EXPECT_EQ(two.grad_bytes, 0);
      // Dropout masks differ per rank (the data each rank sees differs too), so
      // with dropout the curves are not comparable number for number; below,
      // without dropout, they are.
      ASSERT_EQ(two.losses.size(), one.losses.size());
      EXPECT_LT(two.losses.back(), two.losses.front());
    }
  }
  RunOut one_nodrop = Train(tokens, 1, {"peft.dropout=0"});
  for (const char* strategy : {"full_shard", "shard_grad_op"}) {
    SCOPED_TRACE(strategy);
    RunOut two = Train(tokens, 2, {std::string("parallel.strategy=") + strategy, "peft.dropout=0"});
    for (size_t i = 0; i < one_nodrop.losses.size(); ++i)
      EXPECT_NEAR(two.losses[i], one_nodrop.losses[i], 1e-4 * std::fabs(one_nodrop.losses[i])) << "step " << i + 1;
    EXPECT_LT(MaxRelDiff(two.adapters, one_nodrop.adapters), 1e-3);
  }
}

// Under train.precision bf16 the frozen base is stored as bf16 (2 B/param, no
// fp32 master: nothing updates it): half the bytes, every strategy agrees
// with one rank, and a merged export holds the bf16-rounded base exactly.
TEST(LoraTrain, Bf16BaseIsHeldInTwoBytes) {
  const std::string tokens = MakeTokens("lora_bf16", 8000, 512);
  RunOut fp32 = Train(tokens, 1, {"peft.dropout=0"});
  RunOut one = Train(tokens, 1, {"peft.dropout=0", "train.precision=bf16"});
  EXPECT_TRUE(one.base_unchanged);
  EXPECT_LE(one.param_bytes * 2, fp32.param_bytes + 64);
  EXPECT_GE(one.param_bytes * 2, fp32.param_bytes - 64);
  EXPECT_LT(one.losses.back(), one.losses.front());
  for (const char* strategy : {"full_shard", "shard_grad_op", "no_shard"}) {
    SCOPED_TRACE(strategy);
    RunOut two = Train(tokens, 2, {std::string("parallel.strategy=") + strategy, "peft.dropout=0", "train.precision=bf16"});
    EXPECT_TRUE(two.base_unchanged);
    for (size_t i = 0; i < one.losses.size(); ++i)
      EXPECT_NEAR(two.losses[i], one.losses[i], 2e-3 * std::fabs(one.losses[i])) << "step " << i + 1;
  }
  const std::string dir = testing::TempDir() + "/lora_bf16_merged";
  std::filesystem::remove_all(dir);
  for (int world : {1, 2}) {
    SCOPED_TRACE("merged export, world " + std::to_string(world));
    const std::string out = dir + "/w" + std::to_string(world);
    const Status created = testing_ranks::OnTrainerRanks(
        Job(tokens, world, ""), world,
        {"train.steps=2", "train.precision=bf16", "export.merge=true", "export.hf_dir=" + out, "peft.target_modules=[q_proj]"},
        [&](Trainer& tr, int) { ASSERT_TRUE(tr.Run().ok()); });
    ASSERT_TRUE(created.ok()) << created.ToString();
    auto config = LlamaPreset("tiny");
    const ParamLayout layout = ParamLayout::ForLlama(*config);
    std::vector<std::vector<float>> merged;
    ASSERT_TRUE(LoadHfWeights(out, layout, &merged).ok());
    for (int u = 0; u < layout.num_units(); ++u) {
      std::vector<float> base(layout.units[u].numel);
      InitUnitParams(layout.units[u], u, 1234, 0.02f, 0, layout.units[u].numel, base.data());
      for (const TensorSpec& ts : layout.units[u].tensors) {
        if (layout.units[u].kind == UnitKind::kBlock && ts.hf_name.find("q_proj") != std::string::npos) continue;
        for (int64_t i = 0; i < ts.numel; ++i)
          ASSERT_EQ(merged[u][ts.offset + i], BF16ToF32(F32ToBF16(base[ts.offset + i]))) << ts.hf_name << " " << i;
      }
    }
  }
}

TEST(LoraTrain, ExportsPeftLayoutMergedModelAndLoadsItBack) {
  const std::string tokens = MakeTokens("lora_export", 6000, 512);
  const std::string dir = testing::TempDir() + "/lora_export_out";
  std::filesystem::remove_all(dir);
  const std::vector<std::string> sets = {"train.steps=4", "peft.target_modules=[q_proj, v_proj, down_proj]",
                                         "export.hf_dir=" + dir + "/peft"};
  auto job = ParseJobConfig(Job(tokens, 1, ""), "job.yaml", sets);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto t = Trainer::Create(*job);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Run().ok());
  const auto trained = AdapterLayers(**t);
  const LoraLayout ll = (*t)->lora()->layout();
  const float scale = (*t)->lora()->binding()->scale;
  const LlamaConfig config = (*t)->model_config();
  const ParamLayout layout = (*t)->layout();

  // adapter_config.json: what PEFT reads.
  std::ifstream cf(dir + "/peft/adapter_config.json");
  nlohmann::json cfg = nlohmann::json::parse(cf);
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["lora_alpha"], 8.0);
  EXPECT_EQ(cfg["lora_dropout"], 0.1);
  EXPECT_EQ(cfg["bias"], "none");
  EXPECT_EQ(cfg["use_rslora"], false);
  EXPECT_EQ(cfg["base_model_name_or_path"], "tiny");
  EXPECT_EQ(cfg["target_modules"], nlohmann::json({"q_proj", "v_proj", "down_proj"}));
  // adapter_model.safetensors: PEFT's names and shapes, nothing else.
  auto st = SafetensorsFile::Open(dir + "/peft/adapter_model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->tensors().size(), static_cast<size_t>(config.num_layers * 3 * 2));
  const TensorInfo* qa = st->Find("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight");
  const TensorInfo* db = st->Find("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
  ASSERT_TRUE(qa && db);
  EXPECT_EQ(qa->shape, (std::vector<int64_t>{4, config.hidden_size}));
  EXPECT_EQ(db->shape, (std::vector<int64_t>{config.hidden_size, 4}));
  std::vector<std::vector<float>> back;
  ASSERT_TRUE(ReadPeftAdapter(dir + "/peft", job->peft, ll, &back).ok());
  EXPECT_EQ(back, trained);
  // B moved away from zero: the export holds trained adapters.
  double bsum = 0;
  for (float v : back[0]) bsum += std::fabs(v);
  EXPECT_GT(bsum, 0);

  // peft.from_adapter starts a new job from the folder...
  auto again = ParseJobConfig(Job(tokens, 1, ""), "job.yaml",
                              {"peft.target_modules=[q_proj, v_proj, down_proj]", "peft.from_adapter=" + dir + "/peft"});
  ASSERT_TRUE(again.ok());
  auto t2 = Trainer::Create(*again);
  ASSERT_TRUE(t2.ok()) << t2.status().ToString();
  EXPECT_EQ(AdapterLayers(**t2), trained);
  // ...and refuses one that disagrees with the job.
  for (auto [set, part] : std::vector<std::pair<std::string, std::string>>{
           {"peft.r=8", "r is 4 but the job's peft.r is 8"},
           {"peft.target_modules=[q_proj, v_proj]", "target_modules [down_proj, q_proj, v_proj]"}}) {
    auto bad = ParseJobConfig(Job(tokens, 1, ""), "job.yaml",
                              {"peft.target_modules=[q_proj, v_proj, down_proj]", "peft.from_adapter=" + dir + "/peft", set});
    ASSERT_TRUE(bad.ok());
    auto tb = Trainer::Create(*bad);
    ASSERT_FALSE(tb.ok()) << set;
    EXPECT_NE(tb.status().message().find(part), std::string::npos) << tb.status().ToString();
    EXPECT_NE(tb.status().message().find("adapter_config.json"), std::string::npos) << tb.status().ToString();
  }

  // export.merge: the full model with W + s·B·A, checked against the seeded base.
  auto merge_job = ParseJobConfig(Job(tokens, 1, ""), "job.yaml", {"export.merge=true", "export.hf_dir=" + dir + "/m2",
                                  "peft.target_modules=[q_proj, v_proj, down_proj]", "peft.from_adapter=" + dir + "/peft"});
  ASSERT_TRUE(merge_job.ok()) << merge_job.status().ToString();
  auto t3 = Trainer::Create(*merge_job);
  ASSERT_TRUE(t3.ok()) << t3.status().ToString();
  ASSERT_TRUE((*t3)->ExportHf(dir + "/m2", DType::kF32).ok());  // the loaded adapters, untrained further
  std::vector<std::vector<float>> merged;
  ASSERT_TRUE(LoadHfWeights(dir + "/m2", layout, &merged).ok());
  for (int l = 0; l < config.num_layers; ++l) {
    const int u = layout.block_unit(l);
    std::vector<float> base(layout.units[u].numel);
    InitUnitParams(layout.units[u], u, job->train.seed, 0.02f, 0, layout.units[u].numel, base.data());
    for (const LoraTensor& lt : ll.tensors) {
      const TensorSpec& ts = layout.units[u].tensors[LoraBaseTensor(lt.target)];
      for (int64_t o = 0; o < lt.out; o += 7)
        for (int64_t i = 0; i < lt.in; i += 5) {
          double d = 0;
          for (int k = 0; k < ll.r; ++k) d += trained[l][lt.b_offset + o * ll.r + k] * trained[l][lt.a_offset + k * lt.in + i];
          const double want = base[ts.offset + o * lt.in + i] + scale * d;
          ASSERT_NEAR(merged[u][ts.offset + o * lt.in + i], want, 1e-6) << ts.hf_name << " " << o << "," << i;
        }
    }
    // Untargeted weights are the base's.
    const TensorSpec& ks = layout.units[u].tensors[kK];
    for (int64_t i = 0; i < ks.numel; i += 11) ASSERT_EQ(merged[u][ks.offset + i], base[ks.offset + i]);
  }
}

// shardctl eval/generate --adapter: the base folder plus the PEFT folder,
// merged in memory, is the merged export exactly.
TEST(LoraTrain, AdapterOnTopOfABaseFolderIsTheMergedModel) {
  const std::string tokens = MakeTokens("lora_infer", 6000, 512);
  const std::string dir = testing::TempDir() + "/lora_infer_out";
  std::filesystem::remove_all(dir);
  auto job = ParseJobConfig(Job(tokens, 1, ""), "job.yaml", {"train.steps=3", "export.hf_dir=" + dir + "/peft"});
  ASSERT_TRUE(job.ok());
  auto t = Trainer::Create(*job);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Run().ok());
  // The base as an HF folder: a fresh LoRA trainer's merge (B = 0) is the base itself.
  auto base_job = ParseJobConfig(Job(tokens, 1, ""), "job.yaml", {"export.merge=true"});
  ASSERT_TRUE(base_job.ok());
  auto fresh = Trainer::Create(*base_job);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE((*fresh)->ExportHf(dir + "/base", DType::kF32).ok());
  auto merge_job = ParseJobConfig(Job(tokens, 1, ""), "job.yaml", {"export.merge=true", "peft.from_adapter=" + dir + "/peft"});
  ASSERT_TRUE(merge_job.ok());
  auto merged_t = Trainer::Create(*merge_job);
  ASSERT_TRUE(merged_t.ok()) << merged_t.status().ToString();
  ASSERT_TRUE((*merged_t)->ExportHf(dir + "/merged", DType::kF32).ok());

  auto with_adapter = LoadModelForInference(dir + "/base", "cpu");
  ASSERT_TRUE(with_adapter.ok()) << with_adapter.status().ToString();
  ASSERT_TRUE(MergePeftAdapterInto(dir + "/peft", &*with_adapter).ok());
  auto merged = LoadModelForInference(dir + "/merged", "cpu");
  ASSERT_TRUE(merged.ok());
  std::vector<float> a, b;
  int differing_from_base = 0;
  auto base = LoadModelForInference(dir + "/base", "cpu");
  ASSERT_TRUE(base.ok());
  for (int u = 0; u < merged->layout.num_units(); ++u) {
    with_adapter->params->CopyUnitToHost(u, &a);
    merged->params->CopyUnitToHost(u, &b);
    EXPECT_EQ(a, b) << "unit " << u;
    std::vector<float> c;
    base->params->CopyUnitToHost(u, &c);
    differing_from_base += a != c;
  }
  EXPECT_EQ(differing_from_base, merged->config.num_layers);  // every block changed, nothing else
  // What PEFT adapters may carry that shardd would drop is refused by key.
  {
    std::ifstream in(dir + "/peft/adapter_config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    for (auto [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"bias", "lora_only"}, {"modules_to_save", {"lm_head"}}, {"use_dora", true}}) {
      const std::string bad = dir + "/bad_" + key;
      std::filesystem::create_directories(bad);
      std::filesystem::copy_file(dir + "/peft/adapter_model.safetensors", bad + "/adapter_model.safetensors",
                                 std::filesystem::copy_options::overwrite_existing);
      nlohmann::json c = cfg;
      c[key] = value;
      std::ofstream(bad + "/adapter_config.json") << c.dump();
      auto loaded = LoadModelForInference(dir + "/base", "cpu");
      ASSERT_TRUE(loaded.ok());
      Status st = MergePeftAdapterInto(bad, &*loaded);
      ASSERT_FALSE(st.ok()) << key;
      EXPECT_NE(st.message().find(key), std::string::npos) << st.ToString();
    }
  }
  // An adapter for another model shape is refused, naming the file.
  LlamaConfig other = merged->config;
  PeftConfig p = *ReadPeftAdapterConfig(dir + "/peft");
  std::vector<std::vector<float>> layers;
  other.hidden_size *= 2;
  Status st = ReadPeftAdapter(dir + "/peft", p, LoraLayout::For(other, p), &layers);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("adapter_model.safetensors"), std::string::npos) << st.ToString();
}

// Adapter-only checkpoints: a run stopped at step 4 and resumed continues
// exactly as the uninterrupted run (same losses, same adapters, bitwise: the
// dropout masks are a function of the step); the step directory holds only
// the adapters and their moments; another base is refused by name.
TEST(LoraTrain, AdapterCheckpointsResumeExactlyAndKnowTheirBase) {
  const std::string tokens = MakeTokens("lora_resume", 8000, 512);
  const std::string ck = testing::TempDir() + "/lora_resume_ckpt";
  std::filesystem::remove_all(ck);
  auto make = [&](std::vector<std::string> sets) {
    sets.push_back("checkpoint.dir=" + ck);
    sets.push_back("checkpoint.every_steps=4");
    if (std::find_if(sets.begin(), sets.end(), [](const std::string& x) { return x.rfind("checkpoint.resume", 0) == 0; }) == sets.end())
      sets.push_back("checkpoint.resume=auto");
    auto job = ParseJobConfig(Job(tokens, 1, ""), "job.yaml", sets);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return *job;
  };
  // Uninterrupted, into its own directory.
  auto whole_job = make({"train.steps=8", "checkpoint.resume=none", "name=whole"});
  auto whole = Trainer::Create(whole_job);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  std::vector<double> whole_losses;
  ASSERT_TRUE((*whole)->Run([&](const StepMetrics& m) { whole_losses.push_back(m.loss); }).ok());
  // Stopped after 4, then resumed (auto) to 8.
  auto first = Trainer::Create(make({"train.steps=8", "name=split"}));  // same schedule; killed after step 4
  ASSERT_TRUE(first.ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*first)->Step().ok());
  const std::string step_dir = ck + "/split/lora_step_4";
  ASSERT_TRUE(std::filesystem::exists(step_dir + "/state.json"));
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(step_dir)) bytes += e.file_size();
  EXPECT_LT(bytes, 3 * 4 * static_cast<uint64_t>((*first)->lora()->numel()) + 8192);  // adapters + moments only
  auto second = Trainer::Create(make({"train.steps=8", "name=split"}));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ((*second)->step(), 4);
  EXPECT_EQ((*second)->resumed_from(), step_dir);
  std::vector<double> rest;
  ASSERT_TRUE((*second)->Run([&](const StepMetrics& m) { rest.push_back(m.loss); }).ok());
  ASSERT_EQ(rest.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rest[i], whole_losses[4 + i]) << "step " << 5 + i;
  EXPECT_EQ(AdapterLayers(**second), AdapterLayers(**whole));
  // Another base (the preset's init seed differs, so do its weights): refused.
  auto other = Trainer::Create(make({"train.steps=8", "name=split", "train.seed=99", "checkpoint.resume=" + step_dir}));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("another base model"), std::string::npos) << other.status().ToString();
}

TEST(LoraTrain, RefusesWhatIsNotBuilt) {
  const std::string tokens = MakeTokens("lora_refuse", 4000, 512);
  auto refused = [&](const std::vector<std::string>& sets, const std::string& part) {
    auto job = ParseJobConfig(Job(tokens, 1, ""), "job.yaml", sets);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    auto t = Trainer::Create(*job);
    ASSERT_FALSE(t.ok()) << part;
    EXPECT_NE(t.status().message().find(part), std::string::npos) << t.status().ToString();
  };
  refused({"peft.from_adapter=/nowhere"}, "/nowhere/adapter_config.json");
}

}  // namespace
}  // namespace shard
