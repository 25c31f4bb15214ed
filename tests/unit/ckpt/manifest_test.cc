// The COMMITTED manifest: every field survives ToJson → FromJson, and a
// malformed or inconsistent manifest is refused with DATA_LOSS naming the
// source and the problem (never an exception, never a partly filled Manifest).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>

#include "shard/ckpt/manifest.h"

namespace shard {
namespace {

Manifest Full() {
  Manifest m;
  m.job = "llama-ft";
  m.step = 1200;
  m.world = 8;
  m.strategy = "hybrid_shard";
  m.shard_count = 2;
  m.model_hash = 0xfedcba9876543210ull;
  m.model_config = R"({"hidden_size":64,"num_hidden_layers":2,"rope_theta":500000.0})";
  m.units = {{"embed", 4096 * 64}, {"layers.0", 12345}, {"layers.1", 12345}, {"head", 77}};
  m.files = {{"rank_00000-of-00002.shard", 0, 1000, 0x0123456789abcdefull},
             {"rank_00001-of-00002.shard", 1, 999, 0xffffffffffffffffull}};
  m.samples_seen = 9600;
  m.seed = 0xffffffffffffff01ull;  // above INT64_MAX: must survive as unsigned
  m.shuffle = false;
  m.global_batch = 8;
  m.total_steps = 5000;
  m.tokens_seen = 9600 * 2048;
  m.optimizer_steps = 1193;  // 7 steps skipped by the loss scaler
  m.loss_scale_mode = "dynamic";
  m.loss_scale = 32768.0;
  m.loss_scale_good_steps = 17;
  return m;
}

TEST(ManifestTest, StepDirNameIsZeroPadded) {
  EXPECT_EQ(StepDirName(100), "step_00000100");
  EXPECT_EQ(StepDirName(0), "step_00000000");
}

TEST(ManifestTest, RoundTripsEveryField) {
  const Manifest a = Full();
  const std::string text = a.ToJson();
  auto b = Manifest::FromJson(text, "COMMITTED");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->job, a.job);
  EXPECT_EQ(b->step, a.step);
  EXPECT_EQ(b->world, a.world);
  EXPECT_EQ(b->strategy, a.strategy);
  EXPECT_EQ(b->shard_count, a.shard_count);
  EXPECT_EQ(b->model_hash, a.model_hash);
  EXPECT_EQ(nlohmann::json::parse(b->model_config), nlohmann::json::parse(a.model_config));
  EXPECT_EQ(b->units, a.units);
  ASSERT_EQ(b->files.size(), a.files.size());
  for (size_t i = 0; i < a.files.size(); ++i) {
    EXPECT_EQ(b->files[i].name, a.files[i].name);
    EXPECT_EQ(b->files[i].shard_rank, a.files[i].shard_rank);
    EXPECT_EQ(b->files[i].size, a.files[i].size);
    EXPECT_EQ(b->files[i].xxh64, a.files[i].xxh64);
  }
  EXPECT_EQ(b->samples_seen, a.samples_seen);
  EXPECT_EQ(b->seed, a.seed);
  EXPECT_EQ(b->shuffle, a.shuffle);
  EXPECT_EQ(b->global_batch, a.global_batch);
  EXPECT_EQ(b->total_steps, a.total_steps);
  EXPECT_EQ(b->tokens_seen, a.tokens_seen);
  EXPECT_EQ(b->loss_scale, a.loss_scale);
  EXPECT_EQ(b->optimizer_steps, a.optimizer_steps);
  EXPECT_EQ(b->loss_scale_mode, a.loss_scale_mode);
  EXPECT_EQ(b->loss_scale_good_steps, a.loss_scale_good_steps);
  // Stable: a second trip gives the same text.
  EXPECT_EQ(b->ToJson(), text);
}

TEST(ManifestTest, IsHumanReadableJsonWithAVersion) {
  auto j = nlohmann::json::parse(Full().ToJson());
  EXPECT_EQ(j.at("format_version"), kManifestVersion);
  EXPECT_EQ(j.at("files").at(0).at("xxh64"), "0123456789abcdef");
  EXPECT_EQ(j.at("data").at("samples_seen"), 9600);
}

TEST(ManifestTest, EmptyModelConfigIsAnEmptyObject) {
  Manifest m = Full();
  m.model_config.clear();
  auto b = Manifest::FromJson(m.ToJson(), "x");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->model_config, "{}");
}

TEST(ManifestTest, AnOlderManifestWithoutScalerFieldsLoads) {
  // Written before the loss scaler: no schedule.optimizer_steps, no loss_scaler.
  auto j = nlohmann::json::parse(Full().ToJson());
  j["schedule"].erase("optimizer_steps");
  j.erase("loss_scaler");
  j["loss_scale"] = 1.0;
  auto b = Manifest::FromJson(j.dump(), "old/COMMITTED");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->optimizer_steps, b->step) << "every step was an optimizer step before the scaler";
  EXPECT_EQ(b->loss_scale_mode, "off");
  EXPECT_EQ(b->loss_scale, 1.0);
  EXPECT_EQ(b->loss_scale_good_steps, 0);
}

// A dpo/ipo run's reference key travels in the manifest (a resumed full
// fine-tune finds its first attempt's reference file by it); absent: none.
TEST(ManifestTest, CarriesThePreferenceReferenceKey) {
  Manifest m = Full();
  m.reference = "0123456789abcdef";
  auto b = Manifest::FromJson(m.ToJson(), "ref/COMMITTED");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->reference, "0123456789abcdef");
  auto none = Manifest::FromJson(Full().ToJson(), "none/COMMITTED");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->reference, "");
  EXPECT_EQ(nlohmann::json::parse(Full().ToJson()).count("reference"), 0u);
  auto j = nlohmann::json::parse(m.ToJson());
  j["reference"] = "not hex";
  auto bad = Manifest::FromJson(j.dump(), "bad/COMMITTED");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("reference"), std::string::npos) << bad.status().ToString();
}

// Each case edits a good manifest's JSON; FromJson must refuse it with
// DATA_LOSS naming the source and containing `needle`.
struct Bad {
  std::string what;
  std::function<void(nlohmann::json*)> edit;
  std::string needle;
};

TEST(ManifestTest, MalformedManifestsAreRefused) {
  const std::vector<Bad> cases = {
      {"newer format", [](nlohmann::json* j) { (*j)["format_version"] = kManifestVersion + 1; }, "format version"},
      {"no format version", [](nlohmann::json* j) { j->erase("format_version"); }, "malformed manifest"},
      {"no step", [](nlohmann::json* j) { j->erase("step"); }, "malformed manifest"},
      {"step is a string", [](nlohmann::json* j) { (*j)["step"] = "100"; }, "malformed manifest"},
      {"no files", [](nlohmann::json* j) { j->erase("files"); }, "malformed manifest"},
      {"no data section", [](nlohmann::json* j) { j->erase("data"); }, "malformed manifest"},
      {"no samples_seen", [](nlohmann::json* j) { (*j)["data"].erase("samples_seen"); }, "malformed manifest"},
      {"no schedule", [](nlohmann::json* j) { j->erase("schedule"); }, "malformed manifest"},
      {"more optimizer steps than steps", [](nlohmann::json* j) { (*j)["schedule"]["optimizer_steps"] = 1201; },
       "optimizer_steps 1201"},
      {"unknown scaler mode", [](nlohmann::json* j) { (*j)["loss_scaler"]["mode"] = "fp8"; }, "'fp8'"},
      {"scaler without count", [](nlohmann::json* j) { (*j)["loss_scaler"].erase("good_steps"); },
       "malformed manifest"},
      {"unit without numel", [](nlohmann::json* j) { (*j)["units"][0].erase("numel"); }, "malformed manifest"},
      {"file count differs from shard_count", [](nlohmann::json* j) { (*j)["files"].erase(1); }, "1 files for 2 shards"},
      {"more files than shards", [](nlohmann::json* j) { (*j)["shard_count"] = 1; }, "2 files for 1 shards"},
      {"checksum not hex", [](nlohmann::json* j) { (*j)["files"][0]["xxh64"] = "nothex"; }, "nothex"},
      {"checksum too short", [](nlohmann::json* j) { (*j)["files"][0]["xxh64"] = "abc"; }, "abc"},
      {"model hash not hex", [](nlohmann::json* j) { (*j)["model_hash"] = "ZZZZZZZZZZZZZZZZ"; }, "ZZZZ"},
      {"file in a subdirectory", [](nlohmann::json* j) { (*j)["files"][0]["name"] = "../../etc/passwd"; },
       "not a plain file name"},
      {"file named ..", [](nlohmann::json* j) { (*j)["files"][0]["name"] = ".."; }, "not a plain file name"},
      {"empty file name", [](nlohmann::json* j) { (*j)["files"][0]["name"] = ""; }, "not a plain file name"},
      // Found by fuzz_manifest: a float was cast to an integer (undefined
      // behaviour) and an out-of-range integer wrapped.
      {"file size 3.4e98", [](nlohmann::json* j) { (*j)["files"][0]["size"] = 3.45556e98; }, "expected an integer"},
      {"step 1.5", [](nlohmann::json* j) { (*j)["step"] = 1.5; }, "expected an integer"},
      {"world past int", [](nlohmann::json* j) { (*j)["world"] = int64_t{1} << 40; }, "expected an integer"},
      {"negative file size", [](nlohmann::json* j) { (*j)["files"][0]["size"] = -1; }, "expected an integer"},
  };
  const auto good = nlohmann::json::parse(Full().ToJson());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    nlohmann::json j = good;
    c.edit(&j);
    auto m = Manifest::FromJson(j.dump(), "runs/job/step_00001200/COMMITTED");
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << m.status().ToString();
    EXPECT_NE(m.status().message().find("runs/job/step_00001200/COMMITTED"), std::string::npos)
        << m.status().ToString();
    EXPECT_NE(m.status().message().find(c.needle), std::string::npos) << m.status().ToString();
  }
}

// Issue 18 item 2: every field a reader trusts is range-checked (a negative
// samples_seen made the worker segfault on resume).
TEST(ManifestTest, OutOfRangeFieldsAreRefused) {
  const std::vector<Bad> cases = {
      {"negative samples_seen", [](nlohmann::json* j) { (*j)["data"]["samples_seen"] = -5; }, "data.samples_seen -5"},
      {"huge samples_seen", [](nlohmann::json* j) { (*j)["data"]["samples_seen"] = int64_t{1} << 62; },
       "data.samples_seen"},
      {"zero global_batch", [](nlohmann::json* j) { (*j)["data"]["global_batch"] = 0; }, "data.global_batch 0"},
      {"negative global_batch", [](nlohmann::json* j) { (*j)["data"]["global_batch"] = -8; }, "data.global_batch -8"},
      {"negative step", [](nlohmann::json* j) { (*j)["step"] = -1; }, "step -1"},
      {"huge step", [](nlohmann::json* j) { (*j)["step"] = int64_t{1} << 50; }, "step"},
      {"zero world", [](nlohmann::json* j) { (*j)["world"] = 0; }, "world 0"},
      {"zero shard_count", [](nlohmann::json* j) { (*j)["shard_count"] = 0; }, "shard_count 0"},
      {"more shards than ranks", [](nlohmann::json* j) { (*j)["shard_count"] = 9; }, "shard_count 9"},
      {"unknown strategy", [](nlohmann::json* j) { (*j)["strategy"] = "zero4"; }, "'zero4'"},
      {"no units", [](nlohmann::json* j) { (*j)["units"] = nlohmann::json::array(); }, "no units"},
      {"negative numel", [](nlohmann::json* j) { (*j)["units"][1]["numel"] = -3; }, "numel -3"},
      {"negative shard_rank", [](nlohmann::json* j) { (*j)["files"][1]["shard_rank"] = -1; }, "shard_rank -1"},
      {"shard_rank past shard_count", [](nlohmann::json* j) { (*j)["files"][1]["shard_rank"] = 2; }, "shard_rank 2"},
      {"negative file size", [](nlohmann::json* j) { (*j)["files"][1]["size"] = -5; }, "size"},
      {"negative total_steps", [](nlohmann::json* j) { (*j)["schedule"]["total_steps"] = -1; }, "total_steps -1"},
      {"negative optimizer_steps", [](nlohmann::json* j) { (*j)["schedule"]["optimizer_steps"] = -2; },
       "optimizer_steps -2"},
      {"negative tokens_seen", [](nlohmann::json* j) { (*j)["tokens_seen"] = -7; }, "tokens_seen -7"},
      {"zero loss_scale", [](nlohmann::json* j) { (*j)["loss_scale"] = 0.0; }, "loss_scale"},
      {"huge loss_scale", [](nlohmann::json* j) { (*j)["loss_scale"] = 1e300; }, "loss_scale"},
      {"negative good_steps", [](nlohmann::json* j) { (*j)["loss_scaler"]["good_steps"] = -4; }, "good_steps -4"},
      {"model_config not an object", [](nlohmann::json* j) { (*j)["model_config"] = 5; }, "model_config"},
  };
  const auto good = nlohmann::json::parse(Full().ToJson());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    nlohmann::json j = good;
    c.edit(&j);
    for (bool partial : {false, true}) {
      auto m = Manifest::FromJson(j.dump(), "runs/job/step_00001200/COMMITTED", partial);
      ASSERT_FALSE(m.ok());
      EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << m.status().ToString();
      EXPECT_NE(m.status().message().find("runs/job/step_00001200/COMMITTED"), std::string::npos)
          << m.status().ToString();
      EXPECT_NE(m.status().message().find(c.needle), std::string::npos) << m.status().ToString();
    }
  }
}

TEST(ManifestTest, NotJsonIsRefused) {
  for (const std::string text : {"", "COMMITTED", "{\"step\":", "[1,2]", "42", "null"}) {
    auto m = Manifest::FromJson(text, "src");
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(m.status().message().find("src"), std::string::npos);
  }
}

}  // namespace
}  // namespace shard
