// SFT through the Trainer (data.jsonl): the JSONL is prepared once into the job
// directory and reused, rows are packed, the loss is normalised by the global
// target count (so world size and accumulation do not change a step), the
// sampler cursor survives a checkpoint exactly (also onto another world size),
// and bad data settings fail with errors that name the file and key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/manifest.h"
#include "shard/data/prepared_dataset.h"
#include "tests/unit/train/sft_test_util.h"

namespace shard {
namespace {

using namespace sft_testing;

TEST(SftTrainerTest, PreparesOnceTrainsPackedRowsAndLearns) {
  const std::string dir = NewDir("learn");
  const std::string jsonl = WriteReversalJsonl(dir + "/rev.jsonl", 400);
  const std::string header = dir + "/ckpt/sft/data/sft.json";
  const std::string yaml = SftJob(jsonl, dir + "/ckpt");
  RunResult r = RunSft(yaml, 1, {"train.steps=40", "checkpoint.resume=none"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_TRUE(fs::exists(header)) << "the default prepared prefix is <checkpoint.dir>/<job>/data/sft";
  auto data = PreparedDataset::Open(dir + "/ckpt/sft/data/sft");
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(data->num_samples(), 400);

  ASSERT_EQ(r.losses.size(), 40u);
  // Packing: a 32-position row holds two ~14-position samples, so a step of 8
  // rows consumes more than 8 samples; only the responses (+ EOS) are targets.
  int64_t consumed = 0;
  for (const auto& [step, n] : r.samples) {
    EXPECT_GT(n, 8) << "step " << step;
    EXPECT_LT(r.targets.at(step), 8 * 32 / 2) << "step " << step << ": prompts must not be targets";
    consumed += n;
  }
  EXPECT_EQ(r.samples_seen, consumed);
  EXPECT_GT(consumed, 40 * 8 * 3 / 2) << "rows hold about two samples each";
  EXPECT_NEAR(r.losses.at(1), std::log(512.0), 0.3);  // chance
  EXPECT_LT(r.losses.at(40), 0.4 * r.losses.at(1)) << "final loss " << r.losses.at(40);

  // Unchanged input: the next job reuses the prepared files.
  const auto before = fs::last_write_time(header);
  ASSERT_TRUE(RunSft(yaml, 1, {"train.steps=1", "checkpoint.resume=none"}).status.ok());
  EXPECT_EQ(fs::last_write_time(header), before) << "an unchanged dataset was prepared again";
  // Changed input: prepared again.
  WriteReversalJsonl(jsonl, 300, 8);
  ASSERT_TRUE(RunSft(yaml, 1, {"train.steps=1", "checkpoint.resume=none"}).status.ok());
  auto again = PreparedDataset::Open(dir + "/ckpt/sft/data/sft");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->num_samples(), 300);
  fs::remove_all(dir);
}

// One global batch split 1x8 rows or 2 ranks x 2 micro-batches x 2 rows: the
// loss is normalised by the global target count, so the steps agree up to the
// order fp32 partial sums are added.
TEST(SftTrainerTest, WorldSizeAndAccumulationDoNotChangeTheSteps) {
  const std::string dir = NewDir("world");
  const std::string jsonl = WriteReversalJsonl(dir + "/rev.jsonl", 300);
  const RunResult one = RunSft(SftJob(jsonl, dir + "/a"), 1, {"train.steps=3", "train.micro_batch=8"});
  const RunResult two = RunSft(SftJob(jsonl, dir + "/b"), 2, {"train.steps=3", "train.micro_batch=2"});
  ASSERT_TRUE(one.status.ok()) << one.status.ToString();
  ASSERT_TRUE(two.status.ok()) << two.status.ToString();
  for (int64_t s = 1; s <= 3; ++s) {
    EXPECT_NEAR(one.losses.at(s), two.losses.at(s), 1e-5 * one.losses.at(s)) << "step " << s;
    EXPECT_EQ(one.targets.at(s), two.targets.at(s));
    EXPECT_EQ(one.samples.at(s), two.samples.at(s));
  }
  EXPECT_LT(MaxAbsDiff(one.params, two.params), 2e-5);
  fs::remove_all(dir);
}

// Checkpoint at step 2, "die" after step 3, resume: the cursor continues at the
// sample the uninterrupted run reached, bitwise on the same world size and
// within fp32 summation-order noise on another (2 ranks -> 1).
TEST(SftTrainerTest, ResumeContinuesTheCursorExactly) {
  const std::string dir = NewDir("resume");
  const std::string jsonl = WriteReversalJsonl(dir + "/rev.jsonl", 300);
  const std::vector<std::string> ck = {"checkpoint.every_steps=2", "checkpoint.keep_last=5"};
  const RunResult straight = RunSft(SftJob(jsonl, dir + "/straight"), 2, {});
  ASSERT_TRUE(straight.status.ok()) << straight.status.ToString();
  ASSERT_EQ(straight.losses.size(), 6u);

  for (int resume_world : {2, 1}) {
    SCOPED_TRACE("2 ranks resumed on " + std::to_string(resume_world));
    const std::string yaml = SftJob(jsonl, dir + "/w" + std::to_string(resume_world));
    const RunResult first = RunSft(yaml, 2, ck, /*stop_after=*/3);
    ASSERT_TRUE(first.status.ok()) << first.status.ToString();
    for (int64_t s = 1; s <= 3; ++s) EXPECT_EQ(first.losses.at(s), straight.losses.at(s));
    const RunResult resumed = RunSft(yaml, resume_world, ck);
    ASSERT_TRUE(resumed.status.ok()) << resumed.status.ToString();
    EXPECT_EQ(resumed.start_step, 2);
    ASSERT_EQ(resumed.losses.begin()->first, 3) << "the resumed run redid or skipped steps";
    for (int64_t s = 3; s <= 6; ++s) {
      // A cursor off by one sample changes the batch, its target count and its loss at once.
      EXPECT_EQ(resumed.samples.at(s), straight.samples.at(s)) << "step " << s;
      EXPECT_EQ(resumed.targets.at(s), straight.targets.at(s)) << "step " << s;
      if (resume_world == 2) {
        EXPECT_EQ(resumed.losses.at(s), straight.losses.at(s)) << "step " << s;
      } else {
        EXPECT_NEAR(resumed.losses.at(s), straight.losses.at(s), 2e-5 * straight.losses.at(s)) << "step " << s;
      }
    }
    EXPECT_EQ(resumed.samples_seen, straight.samples_seen);
    // The manifest names the data the cursor indexes (a resume onto other data warns).
    auto reader = CheckpointReader::Open(dir + "/w" + std::to_string(resume_world) + "/sft/" + StepDirName(6), true);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ(reader->manifest().data_fingerprint.rfind("sft:", 0), 0u) << reader->manifest().data_fingerprint;
    EXPECT_EQ(reader->manifest().samples_seen, straight.samples_seen);
    const double diff = MaxAbsDiff(straight.params, resumed.params);
    if (resume_world == 2) {
      EXPECT_EQ(diff, 0.0);
    } else {
      EXPECT_LT(diff, 2e-5);
    }
  }
  fs::remove_all(dir);
}

TEST(SftJobConfigTest, StrictErrorsNameTheFileAndKey) {
  const std::string dir = NewDir("config");
  const std::string jsonl = WriteReversalJsonl(dir + "/rev.jsonl", 50);
  const std::string yaml = SftJob(jsonl, dir + "/ckpt");
  auto expect_error = [&](const std::string& text, std::vector<std::string> sets, const std::string& needle) {
    auto job = ParseJobConfig(text, "job.yaml", sets);
    ASSERT_FALSE(job.ok()) << "accepted: " << ::testing::PrintToString(sets);
    EXPECT_NE(job.status().message().find(needle), std::string::npos) << job.status().message();
    EXPECT_EQ(job.status().message().find('\n'), std::string::npos) << "one line: " << job.status().message();
  };
  ASSERT_TRUE(ParseJobConfig(yaml, "job.yaml").ok());
  expect_error(yaml, {"data.template=alpaca"}, "job.yaml: data.template: 'alpaca' is not one of");
  expect_error(yaml, {"data.train_on=user"}, "job.yaml: data.train_on: 'user' is not one of");
  expect_error(yaml, {"data.bad_rows=ignore"}, "job.yaml: data.bad_rows: 'ignore' is not one of");
  expect_error(yaml, {"data.overlong=cut"}, "job.yaml: data.overlong: 'cut' is not one of");
  expect_error(yaml, {"data.packing=maybe"}, "job.yaml: data.packing: expected true or false");
  expect_error(yaml, {"data.packed=true"}, "job.yaml: data.packed: unknown key");
  expect_error(yaml, {"data.tokens=/x.u32"}, "job.yaml: data.tokens and data.jsonl are both set");
  expect_error(yaml, {"data.jsonl="}, "job.yaml: data.tokens or data.jsonl is required");
  std::string no_tok = yaml;
  no_tok.replace(no_tok.find("tokenizer: byte"), 15, "tokenizer: ''");
  expect_error(no_tok, {}, "job.yaml: data.tokenizer must name a tokenizer");
  // SFT keys next to a raw token file would be silently meaningless.
  const std::string tokens_job = "name: t\nmodel: {preset: tiny}\ndata: {tokens: /x.u32, seq_len: 32}\n";
  for (std::string key : {"tokenizer=byte", "template=plain", "packing=false", "prepared=/p", "train_on=all",
                          "bad_rows=skip", "overlong=drop"})
    expect_error(tokens_job, {"data." + key}, "job.yaml: data." + key.substr(0, key.find('=')) +
                                                  ": only applies to SFT data (data.jsonl)");

  // Data problems surface when the trainer prepares the data: a bad row names
  // FILE:LINE (and bad_rows: skip leaves it out); a missing file names itself.
  const std::string bad = dir + "/bad.jsonl";
  {
    std::ofstream f(bad);
    f << "{\"prompt\":\"rev ab=\",\"response\":\"ba\"}\n{\"prompt\":\"x\"}\n{\"prompt\":\"rev cd=\",\"response\":\"dc\"}\n";
  }
  RunResult r = RunSft(SftJob(bad, dir + "/bad"), 1, {"train.steps=1"});
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find(bad + ":2"), std::string::npos) << r.status.message();
  r = RunSft(SftJob(bad, dir + "/skip"), 1, {"train.steps=1", "data.bad_rows=skip"});
  EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  r = RunSft(SftJob(dir + "/missing.jsonl", dir + "/missing"), 1, {"train.steps=1"});
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find(dir + "/missing.jsonl"), std::string::npos) << r.status.message();
  r = RunSft(yaml, 1, {"train.steps=1", "data.tokenizer=" + dir + "/no-tokenizer.json"});
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find("no-tokenizer.json"), std::string::npos) << r.status.message();
  // No data.tokenizer on the tiny preset (vocab 512): the byte tokenizer is not chosen silently.
  std::string unset_tok = yaml;
  unset_tok.replace(unset_tok.find("tokenizer: byte, "), 17, "");
  r = RunSft(unset_tok, 1, {"train.steps=1"});
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find("data.tokenizer is not set"), std::string::npos) << r.status.message();
  // On two ranks, rank 1 does not wait for files rank 0 failed to write.
  r = RunSft(SftJob(bad, dir + "/bad2"), 2, {"train.steps=1", "parallel.comm_timeout_s=20"});
  ASSERT_FALSE(r.status.ok());
  fs::remove_all(dir);
}

// The raw token path still works next to the SFT one (tokens: every position is
// a target, the cursor moves by global_batch).
TEST(SftTrainerTest, TokenWindowsStillTrain) {
  const std::string dir = NewDir("tokens");
  std::vector<uint32_t> toks(4000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint32_t>((i * 7) % 50);
  std::ofstream(dir + "/t.u32", std::ios::binary)
      .write(reinterpret_cast<const char*>(toks.data()), static_cast<std::streamsize>(toks.size() * 4));
  const std::string yaml = "name: t\nmodel: {preset: tiny}\ndata: {tokens: " + dir +
                           "/t.u32, seq_len: 32}\ntrain: {steps: 2, global_batch: 8, micro_batch: 4}\n"
                           "checkpoint: {dir: " + dir + "/ckpt}\nresources: {device: cpu}\n";
  RunResult r = RunSft(yaml, 2, {});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.targets.at(1), 8 * 32);
  EXPECT_EQ(r.samples.at(2), 8);
  EXPECT_EQ(r.samples_seen, 16);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shard
