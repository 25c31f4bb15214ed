// HF weight folders: shard planning, the writer's file names and index, reading
// both layouts back, and broken folders.
#include "shard/ckpt/hf_weights.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/unit/ckpt/ckpt_test_util.h"

namespace shard {
namespace {

namespace fs = std::filesystem;
using testing_util::CkptTest;
using testing_util::F32Bytes;
using testing_util::ReadBytes;
using testing_util::SafetensorsBytes;
using testing_util::WriteBytes;

class HfWeightsTest : public CkptTest {
 protected:
  static std::string Name(size_t i) {
    std::string name = "t";  // (not "t" + ...: g++ 12 -Wrestrict false positive)
    name += std::to_string(i);
    return name;
  }
  // Writes tensors t0..t{n-1} of `sizes` elements each; element j of tensor i is
  // i + j/16, exact in bf16 and fp16 for the sizes used here.
  Status WriteModel(const std::string& dir, const std::vector<int64_t>& sizes, DType dtype,
                    int64_t max_bytes) {
    std::vector<TensorDecl> decls;
    for (size_t i = 0; i < sizes.size(); ++i) decls.push_back({Name(i), {sizes[i]}});
    ASSIGN_OR_RETURN(HfWeightsWriter w, HfWeightsWriter::Create(dir, decls, dtype, max_bytes));
    for (size_t i = 0; i < sizes.size(); ++i) {
      RETURN_IF_ERROR(w.Write(decls[i].name, Values(i, sizes[i]).data()));
    }
    return w.Finish();
  }
  static std::vector<float> Values(size_t i, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j)
      v[static_cast<size_t>(j)] = static_cast<float>(i) + static_cast<float>(j) / 16.0f;
    return v;
  }
  static std::string OneTensorFile(const std::string& name) {
    return SafetensorsBytes(R"({")" + name + R"(":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                            F32Bytes({1, 2}));
  }
  void ExpectOpenError(StatusCode code, const std::vector<std::string>& needles) {
    auto w = HfWeights::Open(dir_);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), code) << w.status().ToString();
    for (const std::string& n : needles) {
      EXPECT_NE(w.status().message().find(n), std::string::npos)
          << "missing '" << n << "' in " << w.status().ToString();
    }
  }
};

TEST(HfShardPlanTest, FileNamesMatchTransformers) {
  EXPECT_EQ(HfShardFileName(0, 1), "model.safetensors");
  EXPECT_EQ(HfShardFileName(0, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(HfShardFileName(11, 12), "model-00012-of-00012.safetensors");
}

TEST(HfShardPlanTest, SplitsInOrder) {
  using V = std::vector<int>;
  EXPECT_EQ(PlanHfShards({}, 10), V{});
  EXPECT_EQ(PlanHfShards({3, 3, 4}, 10), (V{0, 0, 0}));         // exactly full
  EXPECT_EQ(PlanHfShards({3, 3, 5}, 10), (V{0, 0, 1}));         // one byte over
  EXPECT_EQ(PlanHfShards({4, 25, 4, 4}, 10), (V{0, 1, 2, 2}));  // oversized tensor alone
  EXPECT_EQ(PlanHfShards({25, 25}, 10), (V{0, 1}));
  EXPECT_EQ(PlanHfShards({10, 0, 1}, 10), (V{0, 0, 1}));  // empty tensors never open a file
  EXPECT_EQ(PlanHfShards({25, 0, 1}, 10), (V{0, 0, 1}));
  const uint64_t big = UINT64_MAX - 5;
  EXPECT_EQ(PlanHfShards({big, big, 4}, UINT64_MAX - 1), (V{0, 1, 1}));  // no overflow
  EXPECT_EQ(PlanHfShards({big, big, 5}, UINT64_MAX - 1), (V{0, 1, 2}));
}

TEST_F(HfWeightsTest, SingleFileRoundTrip) {
  const std::string dir = Path("nested/model");  // created by the writer
  ASSERT_TRUE(WriteModel(dir, {4, 6}, DType::kF32, 1 << 20).ok());
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));

  auto sf = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(sf.ok());
  EXPECT_EQ(sf->metadata().at("format"), "pt");

  auto w = HfWeights::Open(dir);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->num_files(), 1u);
  EXPECT_EQ(w->TensorNames(), (std::vector<std::string>{"t0", "t1"}));
  std::vector<float> out(6);
  ASSERT_TRUE(w->ReadF32("t1", {6}, out.data()).ok());
  EXPECT_EQ(out, Values(1, 6));
  EXPECT_EQ(w->Find("t0")->shape, std::vector<int64_t>{4});
}

TEST_F(HfWeightsTest, ShardedRoundTripWithIndex) {
  // bf16: 2 bytes/element. Sizes in bytes: 20, 40, 30, 80 (oversized), 10 with a 64-byte limit.
  const std::vector<int64_t> sizes = {10, 20, 15, 40, 5};
  ASSERT_TRUE(WriteModel(dir_, sizes, DType::kBF16, 64).ok());
  const std::vector<std::string> files = {
      "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
      "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"};
  for (const std::string& f : files) EXPECT_TRUE(fs::exists(Path(f))) << f;
  EXPECT_FALSE(fs::exists(Path("model-00005-of-00004.safetensors")));
  EXPECT_FALSE(fs::exists(Path("model.safetensors")));

  const std::string index_text = ReadBytes(Path("model.safetensors.index.json"));
  auto index = nlohmann::json::parse(index_text);
  EXPECT_EQ(index["metadata"]["total_size"], 180);
  EXPECT_EQ(index["weight_map"].size(), 5u);
  EXPECT_EQ(index["weight_map"]["t0"], files[0]);
  EXPECT_EQ(index["weight_map"]["t1"], files[0]);  // 20 + 40 = 60 <= 64
  EXPECT_EQ(index["weight_map"]["t2"], files[1]);  // 60 + 30 > 64
  EXPECT_EQ(index["weight_map"]["t3"], files[2]);  // 80 > 64: alone
  EXPECT_EQ(index["weight_map"]["t4"], files[3]);
  EXPECT_EQ(index_text.back(), '\n');

  auto w = HfWeights::Open(dir_);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->num_files(), 4u);
  EXPECT_EQ(w->TensorNames().size(), 5u);
  EXPECT_EQ(*w->FileOf("t3"), Path(files[2]));
  EXPECT_EQ(w->FileOf("zz"), nullptr);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> out(static_cast<size_t>(sizes[i]));
    const std::string name = Name(i);
    ASSERT_TRUE(w->ReadF32(name, {sizes[i]}, out.data()).ok()) << name;
    EXPECT_EQ(out, Values(i, sizes[i])) << name;
    EXPECT_EQ(w->Find(name)->dtype_name, "BF16");
  }
  float slice[3];
  ASSERT_TRUE(w->ReadF32Range("t3", 37, 3, slice).ok());
  EXPECT_EQ(slice[0], 3.0f + 37.0f / 16.0f);
  EXPECT_EQ(slice[2], 3.0f + 39.0f / 16.0f);
  EXPECT_EQ(w->ReadF32Range("t3", 38, 3, slice).code(), StatusCode::kOutOfRange);
  Status st = w->ReadF32("t2", {16}, slice);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(files[1]), std::string::npos) << st.ToString();
  st = w->ReadF32("lm_head.weight", {1}, slice);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("lm_head.weight"), std::string::npos);
  EXPECT_EQ(w->Find("lm_head.weight"), nullptr);
}

TEST_F(HfWeightsTest, RewriteReplacesTheOtherLayout) {
  ASSERT_TRUE(WriteModel(dir_, {8, 8}, DType::kF32, 1 << 20).ok());
  ASSERT_TRUE(fs::exists(Path("model.safetensors")));
  ASSERT_TRUE(WriteModel(dir_, {8, 8}, DType::kF32, 32).ok());
  EXPECT_FALSE(fs::exists(Path("model.safetensors")))
      << "stale single file would shadow the index in transformers";
  EXPECT_TRUE(fs::exists(Path("model.safetensors.index.json")));
  ASSERT_TRUE(WriteModel(dir_, {8, 8}, DType::kF32, 1 << 20).ok());
  EXPECT_FALSE(fs::exists(Path("model.safetensors.index.json")));
  auto w = HfWeights::Open(dir_);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->num_files(), 1u);
}

TEST_F(HfWeightsTest, AbandonedExportIsNotLoadable) {
  ASSERT_TRUE(WriteModel(dir_, {8, 8}, DType::kF32, 32).ok());  // a previous good export
  {
    auto w = HfWeightsWriter::Create(dir_, {{"t0", {8}}, {"t1", {8}}}, DType::kF32, 32);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write("t0", Values(0, 8).data()).ok());
    ASSERT_TRUE(w->Write("t1", Values(1, 8).data()).ok());  // finishes shard 1, opens shard 2
  }                                                         // dropped without Finish
  auto r = HfWeights::Open(dir_);
  ASSERT_FALSE(r.ok()) << "an unfinished export must not load as a mix of old and new shards";
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST_F(HfWeightsTest, WriterRules) {
  auto bad = HfWeightsWriter::Create(dir_, {{"a", {1}}}, DType::kF32, 0);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  bad = HfWeightsWriter::Create(dir_, {{"a", {1}}, {"a", {1}}}, DType::kF32, 4);  // duplicate across files
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'a'"), std::string::npos);
  // A bad name in a later file is refused before the previous export is touched.
  ASSERT_TRUE(WriteModel(dir_, {1}, DType::kF32, 4).ok());
  bad = HfWeightsWriter::Create(dir_, {{"a", {1}}, {"__metadata__", {1}}}, DType::kF32, 4);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::exists(Path("model.safetensors")));

  auto w = HfWeightsWriter::Create(dir_, {{"a", {1}}, {"b", {1}}}, DType::kF32, 4);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->FileNames(), (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                      "model-00002-of-00002.safetensors"}));
  const float v = 1;
  EXPECT_EQ(w->Write("b", &v).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(w->Write("a", &v).ok());
  Status st = w->Finish();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("'b'"), std::string::npos);
  EXPECT_FALSE(fs::exists(Path("model.safetensors.index.json")));
  ASSERT_TRUE(w->Write("b", &v).ok());
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_EQ(w->Finish().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(HfWeights::Open(dir_).ok());
}

TEST_F(HfWeightsTest, EmptyOrMissingFolder) {
  ExpectOpenError(StatusCode::kNotFound, {dir_, "model.safetensors.index.json", "model.safetensors"});
  auto w = HfWeights::Open(Path("does-not-exist"));
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_NE(w.status().message().find("does-not-exist"), std::string::npos);
}

TEST_F(HfWeightsTest, IndexReferencesMissingFile) {
  WriteBytes(Path("model-00001-of-00002.safetensors"), OneTensorFile("a"));
  WriteBytes(Path("model.safetensors.index.json"),
             R"({"metadata":{"total_size":16},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
             R"("b":"model-00002-of-00002.safetensors"}})");
  ExpectOpenError(StatusCode::kNotFound,
                  {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "'b'"});
}

TEST_F(HfWeightsTest, IndexedTensorAbsentFromItsFile) {
  WriteBytes(Path("model-00001-of-00001.safetensors"), OneTensorFile("a"));
  WriteBytes(
      Path("model.safetensors.index.json"),
      R"({"weight_map":{"a":"model-00001-of-00001.safetensors","ghost":"model-00001-of-00001.safetensors"}})");
  ExpectOpenError(StatusCode::kDataLoss,
                  {"model.safetensors.index.json", "'ghost'", "model-00001-of-00001.safetensors"});
}

TEST_F(HfWeightsTest, CorruptShardNamesIndexAndShard) {
  WriteBytes(Path("s.safetensors"), OneTensorFile("a").substr(0, 20));
  WriteBytes(Path("model.safetensors.index.json"), R"({"weight_map":{"a":"s.safetensors"}})");
  ExpectOpenError(StatusCode::kDataLoss, {"model.safetensors.index.json", "s.safetensors", "header length"});
}

// With both layouts present transformers loads model.safetensors and never
// reads the index; so does shardd (a stale or broken index beside it is ignored).
TEST_F(HfWeightsTest, BothLayoutsLoadTheSingleFileAsTransformersDoes) {
  WriteBytes(Path("model.safetensors"), SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                                         F32Bytes({1, 2})));
  WriteBytes(Path("model-00001-of-00001.safetensors"),
             SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                              F32Bytes({7, 8, 9})));
  WriteBytes(Path("model.safetensors.index.json"),
             R"({"weight_map":{"a":"model-00001-of-00001.safetensors","b":"model-00001-of-00001.safetensors"}})");
  auto w = HfWeights::Open(dir_);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->TensorNames(), std::vector<std::string>{"a"});
  float v[2] = {0, 0};
  ASSERT_TRUE(w->ReadF32("a", {2}, v).ok());
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 2.0f);
  WriteBytes(Path("model.safetensors.index.json"), "{\"weight_map\": ");
  EXPECT_TRUE(HfWeights::Open(dir_).ok());
}

TEST_F(HfWeightsTest, BadIndexFiles) {
  WriteBytes(Path("model.safetensors.index.json"), "{\"weight_map\": ");
  ExpectOpenError(StatusCode::kDataLoss, {"model.safetensors.index.json", "not valid JSON"});
  WriteBytes(Path("model.safetensors.index.json"), R"({"metadata":{}})");
  ExpectOpenError(StatusCode::kDataLoss, {"weight_map"});
  WriteBytes(Path("model.safetensors.index.json"), R"({"weight_map":{}})");
  ExpectOpenError(StatusCode::kDataLoss, {"empty"});
  WriteBytes(Path("model.safetensors.index.json"), R"({"weight_map":{"a":7}})");
  ExpectOpenError(StatusCode::kDataLoss, {"'a'"});
  WriteBytes(Path("model.safetensors.index.json"), R"({"weight_map":{"a":"../model.safetensors"}})");
  ExpectOpenError(StatusCode::kInvalidArgument, {"../model.safetensors"});
  WriteBytes(Path("model.safetensors.index.json"), R"({"weight_map":{"a":"single.safetensors"}})");
  WriteBytes(Path("single.safetensors"), OneTensorFile("a"));
  auto w = HfWeights::Open(dir_);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->TensorNames(), std::vector<std::string>{"a"});
}

}  // namespace
}  // namespace shard
