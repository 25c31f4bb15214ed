// Trainer-level behaviour: the tiny model learns, gradient accumulation does
// not change the result, and bad job files fail with errors that name the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "shard/ckpt/manifest.h"
#include "shard/common/file_util.h"
#include "shard/model/hf_io.h"
#include "shard/train/trainer.h"
#include "tests/unit/train/phrase_tokens.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

std::string MakeTokens(const std::string& name, int n, int vocab) {
  return testing_tokens::MakePhraseTokens(name, n, vocab);
}

std::string Job(const std::string& tokens, const std::string& extra = "") {
  return "name: t\nmodel: {preset: tiny}\ndata: {tokens: " + tokens +
         ", seq_len: 32}\ntrain: {steps: 60, global_batch: 8, micro_batch: 8, lr: 3.0e-3, warmup_steps: 5, "
         "log_every: 1000}\n" +
         extra;
}

TEST(TrainerTest, TinyModelLearnsRepetitiveTokens) {
  std::string tokens = MakeTokens("learn", 20000, 512);
  auto job = ParseJobConfig(Job(tokens), "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto t = Trainer::Create(*job);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<double> losses;
  ASSERT_TRUE((*t)->Run([&](const StepMetrics& m) { losses.push_back(m.loss); }).ok());
  ASSERT_EQ(losses.size(), 60u);
  EXPECT_NEAR(losses.front(), std::log(512.0), 0.3);  // starts at chance
  EXPECT_LT(losses.back(), 0.4 * losses.front()) << "final " << losses.back();
}

TEST(TrainerTest, GradientAccumulationMatchesOneBigMicroBatch) {
  std::string tokens = MakeTokens("accum", 8000, 512);
  auto run = [&](int micro) {
    auto job = ParseJobConfig(Job(tokens), "job.yaml",
                              {"train.steps=3", "train.micro_batch=" + std::to_string(micro)});
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    auto t = Trainer::Create(*job);
    EXPECT_TRUE(t.ok());
    std::vector<double> losses;
    EXPECT_TRUE((*t)->Run([&](const StepMetrics& m) { losses.push_back(m.loss); }).ok());
    std::vector<float> head;
    EXPECT_TRUE((*t)->UnitParams((*t)->layout().head_unit(), &head).ok());
    return std::make_pair(losses, head);
  };
  auto [l8, w8] = run(8);
  auto [l2, w2] = run(2);
  ASSERT_EQ(l8.size(), l2.size());
  for (size_t i = 0; i < l8.size(); ++i) EXPECT_NEAR(l8[i], l2[i], 1e-5);
  ASSERT_EQ(w8.size(), w2.size());
  for (size_t i = 0; i < w8.size(); ++i) ASSERT_NEAR(w8[i], w2[i], 2e-5) << i;
}

// train.loss_chunk_rows: the LM head and loss in chunks of 100 rows (256 rows
// per micro-batch: chunks of 100, 100, 56) follow the unchunked loss curve;
// only dW_head's summation order differs.
TEST(TrainerTest, ChunkedLossFollowsTheUnchunkedCurve) {
  std::string tokens = MakeTokens("chunk", 8000, 512);
  auto run = [&](const std::string& chunk) {
    auto job = ParseJobConfig(Job(tokens), "job.yaml", {"train.steps=8", "train.loss_chunk_rows=" + chunk});
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    auto t = Trainer::Create(*job);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    std::vector<double> losses;
    EXPECT_TRUE((*t)->Run([&](const StepMetrics& m) { losses.push_back(m.loss); }).ok());
    std::vector<float> head;
    EXPECT_TRUE((*t)->UnitParams((*t)->layout().head_unit(), &head).ok());
    return std::make_pair(losses, head);
  };
  auto [la, wa] = run("0");  // auto: 256 x 512 x 4 B fits, one chunk
  auto [lc, wc] = run("100");
  ASSERT_EQ(la.size(), 8u);
  ASSERT_EQ(la.size(), lc.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lc[i], 1e-5) << "step " << i;
  EXPECT_LT(la.back(), la.front());  // it trains
  ASSERT_EQ(wa.size(), wc.size());
  for (size_t i = 0; i < wa.size(); ++i) ASSERT_NEAR(wa[i], wc[i], 2e-5) << i;
}

TEST(TrainerTest, ExportedModelReloadsAndContinuesIdentically) {
  std::string tokens = MakeTokens("export", 8000, 512);
  std::string out = testing::TempDir() + "/trainer_export";
  fs::remove_all(out);
  auto job = ParseJobConfig(Job(tokens, "export: {hf_dir: " + out + "}\n"), "job.yaml", {"train.steps=2"});
  ASSERT_TRUE(job.ok());
  auto t = Trainer::Create(*job);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*t)->Run().ok());
  ASSERT_TRUE(fs::exists(out + "/model.safetensors"));
  // from_hf starts from exactly the exported weights.
  auto job2 = ParseJobConfig(Job(tokens), "job.yaml", {"model.preset=", "model.from_hf=" + out, "train.steps=1"});
  ASSERT_TRUE(job2.ok()) << job2.status().ToString();
  auto t2 = Trainer::Create(*job2);
  ASSERT_TRUE(t2.ok()) << t2.status().ToString();
  for (int u = 0; u < (*t)->layout().num_units(); ++u) {
    std::vector<float> a, b;
    ASSERT_TRUE((*t)->UnitParams(u, &a).ok());
    ASSERT_TRUE((*t2)->UnitParams(u, &b).ok());
    ASSERT_EQ(a, b) << "unit " << u;
  }
}

// A token-stream job started from an HF folder exports a complete folder: the
// folder's tokenizer files and generation_config.json go along beside the
// weights (as a chat job's do), so the export loads and generates as it is.
TEST(TrainerTest, TokenStreamJobFromHfExportsTheFoldersTokenizer) {
  std::string tokens = MakeTokens("tok_export", 8000, 512);
  const std::string hf = testing::TempDir() + "/trainer_tok_export_hf";
  const std::string out = testing::TempDir() + "/trainer_tok_export_out";
  fs::remove_all(hf);
  fs::remove_all(out);
  {
    auto job = ParseJobConfig(Job(tokens, "export: {hf_dir: " + hf + "}\n"), "job.yaml", {"train.steps=1"});
    ASSERT_TRUE(job.ok());
    auto t = Trainer::Create(*job);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*t)->Run().ok());
  }
  const std::map<std::string, std::string> files = {
      {"tokenizer.json",
       R"({"version":"1.0","added_tokens":[{"id":9,"content":"<|x|>","special":true,"normalized":false}],)"
       R"("normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,)"
       R"("use_regex":true},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},)"
       R"("merges":["a b"]}})"},
      {"tokenizer_config.json", R"({"eos_token": "<|x|>"})"},
      {"generation_config.json", R"({"eos_token_id": 9, "temperature": 0.7})"}};
  for (const auto& [name, text] : files) std::ofstream(hf + "/" + name) << text;
  auto job = ParseJobConfig(Job(tokens), "job.yaml",
                            {"model.preset=", "model.from_hf=" + hf, "train.steps=1", "export.hf_dir=" + out});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto t = Trainer::Create(*job);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Run().ok());
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/config.json"));
  for (const auto& [name, text] : files) {
    std::ifstream in(out + "/" + name);
    ASSERT_TRUE(in.good()) << "the export lacks " << name;
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text) << name;
  }
}

// A job from an HF folder exports that folder's config.json (every key and
// value, only torch_dtype changed), in the trainer's export and in each
// committed step's manifest (what shardctl export writes from), and a
// generation_config.json derived from it when the folder had none.
TEST(TrainerTest, ExportKeepsTheSourceConfigAndWritesAGenerationConfig) {
  std::string tokens = MakeTokens("cfg_export", 8000, 512);
  const std::string hf = testing::TempDir() + "/trainer_cfg_export_hf";
  const std::string out = testing::TempDir() + "/trainer_cfg_export_out";
  const std::string ckpt = testing::TempDir() + "/trainer_cfg_export_ckpt";
  for (const auto& d : {hf, out, ckpt}) fs::remove_all(d);
  {
    auto job = ParseJobConfig(Job(tokens, "export: {hf_dir: " + hf + "}\n"), "job.yaml", {"train.steps=1"});
    ASSERT_TRUE(job.ok());
    auto t = Trainer::Create(*job);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*t)->Run().ok());
  }
  fs::remove(hf + "/generation_config.json");
  nlohmann::ordered_json src = nlohmann::ordered_json::parse(std::ifstream(hf + "/config.json"));
  src["bos_token_id"] = 1, src["eos_token_id"] = 2, src["initializer_range"] = 0.02, src["use_cache"] = true;
  src["attention_dropout"] = 0.0, src["torch_dtype"] = "bfloat16", src["transformers_version"] = "4.44.0";
  std::ofstream(hf + "/config.json") << src.dump(2);
  auto job = ParseJobConfig(Job(tokens), "job.yaml",
                            {"model.preset=", "model.from_hf=" + hf, "train.steps=1", "export.hf_dir=" + out,
                             "checkpoint.dir=" + ckpt, "checkpoint.every_steps=1"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto t = Trainer::Create(*job);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Run().ok());
  const auto got = nlohmann::ordered_json::parse(std::ifstream(out + "/config.json"));
  std::vector<std::string> src_keys, got_keys;
  for (const auto& [k, v] : src.items()) src_keys.push_back(k);
  for (const auto& [k, v] : got.items()) got_keys.push_back(k);
  EXPECT_EQ(got_keys, src_keys);
  for (const auto& [k, v] : src.items())
    if (k != "torch_dtype") {
      EXPECT_EQ(got.at(k), v) << k;
    }
  EXPECT_EQ(got.at("torch_dtype"), "float32");
  std::ifstream gen_in(out + "/generation_config.json");
  ASSERT_TRUE(gen_in.good()) << "the export lacks generation_config.json";
  const auto gen = nlohmann::json::parse(gen_in);
  EXPECT_EQ(gen.at("bos_token_id"), 1);
  EXPECT_EQ(gen.at("eos_token_id"), 2);
  auto committed = ReadFileToString(ckpt + "/t/step_00000001/COMMITTED");
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  auto m = Manifest::FromJson(*committed, "COMMITTED");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(m->source_config), nlohmann::json(src));
}

// A save never writes through a link: a step folder that links to another
// run's step is refused naming it, and that step keeps its bytes.
TEST(TrainerTest, CheckpointSaveNeverWritesThroughALink) {
  std::string tokens = MakeTokens("ckpt_link", 8000, 512);
  const std::string root = testing::TempDir() + "/trainer_ckpt_link";
  fs::remove_all(root);
  fs::create_directories(root + "/other/step_00000002");
  std::ofstream(root + "/other/step_00000002/COMMITTED") << "another run's";
  fs::create_directories(root + "/ckpt/t");
  fs::create_symlink(root + "/other/step_00000002", root + "/ckpt/t/step_00000002");
  auto job = ParseJobConfig(Job(tokens), "job.yaml",
                            {"train.steps=2", "checkpoint.dir=" + root + "/ckpt", "checkpoint.every_steps=2",
                             "checkpoint.async=false"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto t = Trainer::Create(*job);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Status st = (*t)->Run();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("step_00000002 is a symbolic link"), std::string::npos) << st.ToString();
  EXPECT_EQ(fs::directory_iterator(root + "/other/step_00000002")->path().filename(), "COMMITTED");
  std::ifstream in(root + "/other/step_00000002/COMMITTED");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "another run's");
}

// A resumed from_hf job reads config.json only: with the safetensors moved
// away after the first checkpoint, the restart still resumes and trains, while
// a fresh start (checkpoint.resume: none) fails naming the missing weights.
TEST(TrainerTest, ResumeFromCheckpointNeverOpensHfWeights) {
  std::string tokens = MakeTokens("hf_resume", 8000, 512);
  const std::string hf = testing::TempDir() + "/trainer_hf_resume_model";
  const std::string ckpt = testing::TempDir() + "/trainer_hf_resume_ckpt";
  fs::remove_all(hf);
  fs::remove_all(ckpt);
  {
    auto job = ParseJobConfig(Job(tokens, "export: {hf_dir: " + hf + "}\n"), "job.yaml", {"train.steps=1"});
    ASSERT_TRUE(job.ok());
    auto t = Trainer::Create(*job);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*t)->Run().ok());
  }
  const std::vector<std::string> sets = {"model.preset=", "model.from_hf=" + hf, "checkpoint.dir=" + ckpt,
                                         "checkpoint.every_steps=2", "checkpoint.async=false"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), sets.begin(), sets.end());
    return ParseJobConfig(Job(tokens), "job.yaml", extra);
  };
  {
    auto job = with({"train.steps=2"});
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    auto t = Trainer::Create(*job);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->Run().ok());
  }
  fs::rename(hf + "/model.safetensors", hf + "/moved.bin");
  auto job = with({"train.steps=4"});
  ASSERT_TRUE(job.ok());
  auto t = Trainer::Create(*job);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NE((*t)->resumed_from().find("step_00000002"), std::string::npos) << (*t)->resumed_from();
  ASSERT_TRUE((*t)->Run().ok());
  EXPECT_EQ((*t)->step(), 4);
  // Not resuming, the weights are needed and their absence is named.
  auto fresh = with({"train.steps=4", "checkpoint.resume=none"});
  ASSERT_TRUE(fresh.ok());
  auto f = Trainer::Create(*fresh);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(hf), std::string::npos) << f.status().ToString();
}

TEST(JobConfigTest, StrictErrorsNameTheKey) {
  std::string tokens = MakeTokens("cfg", 1000, 512);
  auto expect_error = [&](const std::string& text, const std::string& needle, std::vector<std::string> sets = {}) {
    auto job = ParseJobConfig(text, "job.yaml", sets);
    ASSERT_FALSE(job.ok()) << "accepted: " << text;
    EXPECT_NE(job.status().message().find(needle), std::string::npos) << job.status().message();
  };
  expect_error(Job(tokens) + "bogus: 1\n", "job.yaml: bogus: unknown key");
  expect_error(Job(tokens), "train.stepz: unknown key", {"train.stepz=3"});
  expect_error(Job(tokens), "train.steps: expected an integer", {"train.steps=ten"});
  expect_error(Job(tokens), "train.global_batch 12 must be a multiple", {"train.global_batch=12"});
  expect_error(Job(tokens), "parallel.strategy: 'zero5' is not one of", {"parallel.strategy=zero5"});
  expect_error(Job(tokens), "exactly one of model.preset or model.from_hf", {"model.from_hf=/x"});
  expect_error(Job(tokens), "train.adam_betas: expected two numbers", {"train.adam_betas=[0.9]"});
  expect_error(Job(tokens), "train.loss_chunk_rows: must be >= 0", {"train.loss_chunk_rows=-1"});
  expect_error(Job(tokens), "train.loss_chunk_rows: expected an integer", {"train.loss_chunk_rows=auto"});
  expect_error(Job(tokens), "data.tokens and data.jsonl are both set", {"data.jsonl=x.jsonl"});
  expect_error("name: t\n", "exactly one of model.preset");
  expect_error("name: t\nmodel: {preset: tiny}\n", "data.tokens or data.jsonl is required");
  // A missing file and an unsupported world size fail at trainer creation with a clear reason.
  auto missing = ParseJobConfig(Job("/nonexistent/tokens.u32"), "job.yaml");
  ASSERT_TRUE(missing.ok());
  auto t = Trainer::Create(*missing);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("/nonexistent/tokens.u32"), std::string::npos);
  auto wide = ParseJobConfig(Job(tokens), "job.yaml", {"parallel.world_size=2", "train.micro_batch=4"});
  ASSERT_TRUE(wide.ok()) << wide.status().ToString();
  auto mismatch = Trainer::Create(*wide);  // started as a single process
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("parallel.world_size is 2"), std::string::npos);
  // Tokens outside the vocabulary are named with their index.
  std::string big = testing::TempDir() + "/big." + std::to_string(::getpid()) + ".u32";
  std::vector<uint32_t> toks(100, 1);
  toks[57] = 600;
  std::ofstream(big, std::ios::binary).write(reinterpret_cast<const char*>(toks.data()), toks.size() * 4);
  auto oov = Trainer::Create(*ParseJobConfig(Job(big), "job.yaml"));
  ASSERT_FALSE(oov.ok());
  EXPECT_NE(oov.status().message().find("token 600 at index 57"), std::string::npos) << oov.status().message();
}

TEST(JobConfigTest, ShippedJobFilesParse) {
  const char* src = std::getenv("SHARDD_SOURCE_DIR");
  std::string root = src ? src : ".";
  int n = 0;
  for (const auto& e : fs::directory_iterator(root + "/configs/jobs")) {
    auto job = LoadJobConfig(e.path().string());
    EXPECT_TRUE(job.ok()) << e.path() << ": " << job.status().ToString();
    ++n;
  }
  EXPECT_GT(n, 0);
}

}  // namespace
}  // namespace shard
