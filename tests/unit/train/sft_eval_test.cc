// Exact-match evaluation of greedy answers (shard/train/sft_eval.h) and
// `shardctl eval --data`: a model that memorised a handful of reversals
// answers all of them exactly, from its HF export and from its checkpoint; an
// untrained one answers none and sits at chance loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shard/data/prepared_dataset.h"
#include "shard/ckpt/manifest.h"
#include "shard/common/process.h"
#include "shard/train/local_params.h"
#include "shard/train/sft_eval.h"
#include "tests/unit/train/sft_test_util.h"

namespace shard {
namespace {

using namespace sft_testing;

TEST(SftEvalTest, LastAnswerSpanIsTheLastRunOfTargets) {
  const uint32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  auto span = [&](std::vector<uint8_t> mask) {
    return LastAnswerSpan(SampleView{tok, mask.data(), static_cast<int64_t>(mask.size())});
  };
  AnswerSpan a = span({0, 0, 0, 1, 1, 1});
  EXPECT_EQ(a.begin, 3);
  EXPECT_EQ(a.end, 6);
  a = span({0, 0, 1, 1, 0, 0, 1, 1});  // two replies: the last one
  EXPECT_EQ(a.begin, 6);
  EXPECT_EQ(a.end, 8);
  a = span({0, 1, 1, 0});  // a trailing non-target
  EXPECT_EQ(a.begin, 1);
  EXPECT_EQ(a.end, 3);
  EXPECT_EQ(span({1, 1, 1}).begin, 1);  // token 0 is never a target
  EXPECT_EQ(span({1, 0, 0}).size(), 0);
  EXPECT_EQ(span({0}).size(), 0);
}

class SftEvalFixture : public ::testing::Test {
 protected:
  // Trains once for all tests: 8 reversals, 100 steps of one epoch each.
  static void SetUpTestSuite() {
    dir_ = new std::string(NewDir("eval"));
    const std::string jsonl = WriteReversalJsonl(*dir_ + "/rev.jsonl", 8);
    const std::string yaml = SftJob(jsonl, *dir_ + "/ckpt");
    RunResult r = RunSft(yaml, 1,
                         {"train.steps=100", "train.global_batch=4", "train.micro_batch=4", "train.schedule=constant",
                          "checkpoint.every_steps=100"});
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    std::printf("[ measured ] memorisation run: final loss %.4f\n", r.losses.rbegin()->second);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string Prefix() { return *dir_ + "/ckpt/sft/data/sft"; }
  static std::string StepDir() { return *dir_ + "/ckpt/sft/" + StepDirName(100); }
  static std::string* dir_;
};
std::string* SftEvalFixture::dir_ = nullptr;

TEST_F(SftEvalFixture, MemorisedAnswersMatchExactlyFromTheCheckpoint) {
  auto data = PreparedDataset::Open(Prefix());
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto m = LoadModelForInference(StepDir(), "cpu");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  SftEvalOptions o;
  o.batch = 3;  // uneven groups: answers of different lengths decode side by side
  o.keep_answers = 8;
  auto r = EvaluateSft(m->config, m->backend.get(), *m->params, *data, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples, 8);
  EXPECT_EQ(r->scored, 8);
  EXPECT_EQ(r->exact, 8) << "loss " << r->loss;
  EXPECT_LT(r->loss, 0.05);
  ASSERT_EQ(r->answers.size(), 8u);
  for (const auto& a : r->answers) {
    EXPECT_EQ(a.greedy, a.expected);
    EXPECT_EQ(a.expected.back(), 257) << "the answer ends with the byte tokenizer's EOS";
    EXPECT_EQ(a.prompt.front(), 256) << "the prompt starts with BOS";
  }
}

TEST_F(SftEvalFixture, UntrainedModelIsAtChance) {
  auto data = PreparedDataset::Open(Prefix());
  ASSERT_TRUE(data.ok());
  auto m = LoadModelForInference(StepDir(), "cpu");
  ASSERT_TRUE(m.ok());
  m->params->InitRandom(1234, 0.02f);
  auto r = EvaluateSft(m->config, m->backend.get(), *m->params, *data, SftEvalOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exact, 0);
  EXPECT_NEAR(r->loss, std::log(512.0), 0.3);
}

// Runs shardctl (args split at spaces); returns its exit code and its stdout
// and stderr together.
std::pair<int, std::string> Shardctl(const std::string& args) {
  const char* bin = std::getenv("SHARDD_BIN_DIR");
  shard::SpawnOptions so;
  so.argv = {std::string(bin ? bin : "build") + "/coordinator/ctl/shardctl"};
  std::istringstream words(args);
  for (std::string w; words >> w;) so.argv.push_back(w);
  auto run = shard::RunCapturingStdout(so, shard::CapturedStderr::kMerge);
  if (!run.ok()) return {-1, run.status().ToString()};
  return {run->exit.signal == 0 ? run->exit.code : -1, run->out};
}

TEST_F(SftEvalFixture, ShardctlEvalDataReportsExactMatch) {
  // An HF export of the checkpoint, then eval on the JSONL (prepared on the fly)
  // and on the prepared prefix.
  auto [erc, eout] = Shardctl("export " + StepDir() + " --out " + *dir_ + "/hf");
  ASSERT_EQ(erc, 0) << eout;
  for (const std::string& data : {*dir_ + "/rev.jsonl", Prefix()}) {
    auto [rc, out] = Shardctl("eval --model " + *dir_ + "/hf --data " + data + " --json");
    ASSERT_EQ(rc, 0) << out;
    auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << out;
    EXPECT_EQ(j["samples"], 8);
    EXPECT_EQ(j["exact"], 8);
    EXPECT_DOUBLE_EQ(j["exact_match"].get<double>(), 1.0);
    EXPECT_LT(j["loss"].get<double>(), 0.05);
  }
  // Text output, from the checkpoint step folder, with examples decoded.
  auto [rc, out] = Shardctl("eval --model " + StepDir() + " --data " + Prefix() + " --show 2");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("exact match 8/8 = 100.0%"), std::string::npos) << out;
  EXPECT_NE(out.find("ok   \"<s>rev "), std::string::npos) << out;
  // Bad input: a one-line reason and a non-zero exit.
  auto [brc, bout] = Shardctl("eval --model " + StepDir() + " --data " + *dir_ + "/nope");
  EXPECT_NE(brc, 0);
  EXPECT_NE(bout.find("neither a prepared dataset"), std::string::npos) << bout;
  auto [trc, tout] = Shardctl("eval --model " + StepDir() + " --data " + Prefix() + " --tokens " + *dir_ + "/rev.jsonl");
  EXPECT_NE(trc, 0);
  EXPECT_NE(tout.find("exactly one of --tokens"), std::string::npos) << tout;
}

// eval --data F.jsonl --model HF_DIR tokenizes with the folder's own
// tokenizer when it has one (as a job from that folder does), byte otherwise.
TEST_F(SftEvalFixture, ShardctlEvalDataDefaultsToTheModelFoldersTokenizer) {
  const std::string hf = *dir_ + "/hf_tok";
  auto [erc, eout] = Shardctl("export " + StepDir() + " --out " + hf);
  ASSERT_EQ(erc, 0) << eout;
  const char* src = std::getenv("SHARDD_SOURCE_DIR");
  fs::copy_file(std::string(src ? src : ".") + "/tests/testdata/tokenizers/sp_small.model", hf + "/tokenizer.model");
  auto eval = [&](const std::string& extra) {
    auto [rc, out] = Shardctl("eval --model " + hf + " --data " + *dir_ + "/rev.jsonl --json" + extra);
    EXPECT_EQ(rc, 0) << out;
    auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(j.is_object()) << out;
    return j.is_object() ? std::make_pair(j.value("loss", -1.0), j.value("tokens", int64_t{-1}))
                         : std::make_pair(-1.0, int64_t{-1});
  };
  const auto by_default = eval(""), folder = eval(" --tokenizer " + hf), byte = eval(" --tokenizer byte");
  EXPECT_EQ(by_default, folder) << "the default is not the folder's tokenizer";
  EXPECT_NE(by_default, byte) << "the default is still byte";
}

}  // namespace
}  // namespace shard
