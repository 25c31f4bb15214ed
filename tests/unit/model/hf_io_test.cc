#include "shard/model/hf_io.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "shard/ckpt/hf_weights.h"
#include "shard/common/file_util.h"
#include "shard/model/init.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

LlamaConfig Small(bool tied) {
  LlamaConfig c;
  c.vocab_size = 40;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.tie_word_embeddings = tied;
  return c;
}

std::vector<std::vector<float>> RandomUnits(const ParamLayout& l) {
  std::vector<std::vector<float>> u(l.num_units());
  for (int i = 0; i < l.num_units(); ++i) {
    u[i].resize(l.units[i].numel);
    InitUnitParams(l.units[i], i, 3, 0.5f, 0, l.units[i].numel, u[i].data());
  }
  return u;
}

std::string Dir(const std::string& name) {
  std::string d = testing::TempDir() + "/hf_io_" + name;
  fs::remove_all(d);
  return d;
}

Status Export(const std::string& dir, const LlamaConfig& c, const std::vector<std::vector<float>>& units, DType dt,
              int64_t max_bytes = int64_t{1} << 30) {
  ParamLayout l = ParamLayout::ForLlama(c);
  return ExportHf(dir, c, l, [&](int u, std::vector<float>* buf) { *buf = units[u]; return OkStatus(); }, dt,
                  max_bytes);
}

TEST(HfIoTest, ExportThenLoadIsExact) {
  for (bool tied : {false, true}) {
    LlamaConfig c = Small(tied);
    ParamLayout l = ParamLayout::ForLlama(c);
    auto units = RandomUnits(l);
    std::string d = Dir(tied ? "tied" : "untied");
    ASSERT_TRUE(Export(d, c, units, DType::kF32).ok());
    EXPECT_TRUE(fs::exists(d + "/config.json"));
    EXPECT_TRUE(fs::exists(d + "/model.safetensors"));
    auto cfg = LlamaConfigFromHfDir(d);
    ASSERT_TRUE(cfg.ok());
    EXPECT_EQ(cfg->ShapeHash(), c.ShapeHash());
    std::vector<std::vector<float>> back;
    ASSERT_TRUE(LoadHfWeights(d, l, &back).ok());
    EXPECT_EQ(back, units);
  }
}

TEST(HfIoTest, ShardedBf16ExportLoadsWithinRounding) {
  LlamaConfig c = Small(false);
  ParamLayout l = ParamLayout::ForLlama(c);
  auto units = RandomUnits(l);
  std::string d = Dir("sharded");
  ASSERT_TRUE(Export(d, c, units, DType::kBF16, /*max_bytes=*/4000).ok());
  EXPECT_TRUE(fs::exists(d + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(d + "/model.safetensors"));
  std::vector<std::vector<float>> back;
  ASSERT_TRUE(LoadHfWeights(d, l, &back).ok());
  for (size_t u = 0; u < units.size(); ++u)
    for (size_t i = 0; i < units[u].size(); ++i)
      ASSERT_NEAR(back[u][i], units[u][i], std::abs(units[u][i]) * (1.0 / 256) + 1e-30);
}

// Writes an HF folder with the given tensors (name, shape), all zeros.
void WriteFolder(const std::string& d, const LlamaConfig& c, const std::vector<TensorDecl>& decls) {
  fs::create_directories(d);
  ASSERT_TRUE(WriteFileAtomic(d + "/config.json", c.ToHfConfigJson()).ok());
  auto w = HfWeightsWriter::Create(d, decls, DType::kF32, int64_t{1} << 30);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (const auto& t : decls) {
    int64_t n = 1;
    for (auto s : t.shape) n *= s;
    std::vector<float> zeros(n, 0.0f);
    ASSERT_TRUE(w->Write(t.name, zeros.data()).ok());
  }
  ASSERT_TRUE(w->Finish().ok());
}

std::vector<TensorDecl> Decls(const ParamLayout& l) {
  std::vector<TensorDecl> d;
  for (const auto& u : l.units)
    for (const auto& t : u.tensors) d.push_back({t.hf_name, t.shape});
  return d;
}

// Rank-local loading: any range of a unit's flat buffer (a shard, across
// tensor boundaries and sharded bf16 files) reads exactly those elements of
// the whole-unit read, and leaves the padding past the unit alone.
TEST(HfIoTest, UnitRangesReadExactlyTheirSliceOfTheUnit) {
  LlamaConfig c = Small(false);
  ParamLayout l = ParamLayout::ForLlama(c);
  auto units = RandomUnits(l);
  std::string d = Dir("ranges");
  ASSERT_TRUE(Export(d, c, units, DType::kBF16, /*max_bytes=*/4000).ok());
  std::vector<std::vector<float>> whole;
  ASSERT_TRUE(LoadHfWeights(d, l, &whole).ok());
  auto weights = OpenHfWeightsFor(d, c, l);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  for (int u = 0; u < l.num_units(); ++u) {
    const int64_t n = l.units[u].numel;
    for (int shards : {1, 2, 3, 8}) {
      const int64_t per = (n + shards - 1) / shards;
      for (int r = 0; r < shards; ++r) {
        const int64_t begin = r * per, end = begin + per;  // the last shard runs past the unit
        std::vector<float> got(per, -7.0f);
        ASSERT_TRUE(ReadHfUnitRange(*weights, l.units[u], begin, end, got.data()).ok());
        for (int64_t i = begin; i < end; ++i)
          ASSERT_EQ(got[i - begin], i < n ? whole[u][i] : -7.0f) << "unit " << u << " element " << i;
      }
    }
  }
}

TEST(HfIoTest, MissingUnknownAndMisshapenTensorsAreNamed) {
  LlamaConfig c = Small(false);
  ParamLayout l = ParamLayout::ForLlama(c);
  std::vector<std::vector<float>> out;

  auto missing = Decls(l);
  missing.erase(missing.begin() + 3);  // drop one block tensor
  std::string d1 = Dir("missing");
  WriteFolder(d1, c, missing);
  Status s1 = LoadHfWeights(d1, l, &out);
  ASSERT_FALSE(s1.ok());
  EXPECT_NE(s1.message().find("model.layers.0.self_attn.k_proj.weight"), std::string::npos) << s1.message();
  EXPECT_NE(s1.message().find("missing"), std::string::npos);

  auto unknown = Decls(l);
  unknown.push_back({"model.layers.0.self_attn.q_proj.bias", {16}});
  std::string d2 = Dir("unknown");
  WriteFolder(d2, c, unknown);
  Status s2 = LoadHfWeights(d2, l, &out);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.message().find("q_proj.bias"), std::string::npos) << s2.message();

  auto shaped = Decls(l);
  shaped[1].shape = {16, 17};  // wrong input_layernorm shape
  std::string d3 = Dir("shape");
  WriteFolder(d3, c, shaped);
  Status s3 = LoadHfWeights(d3, l, &out);
  ASSERT_FALSE(s3.ok());
  EXPECT_NE(s3.message().find("input_layernorm"), std::string::npos) << s3.message();

  // Old Llama-2 checkpoints carry rotary inv_freq buffers: ignored.
  auto rotary = Decls(l);
  rotary.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {2}});
  std::string d4 = Dir("rotary");
  WriteFolder(d4, c, rotary);
  EXPECT_TRUE(LoadHfWeights(d4, l, &out).ok());

  Status s5 = LoadHfWeights(Dir("nonexistent"), l, &out);
  EXPECT_FALSE(s5.ok());
}

// An inf/NaN weight is refused as it streams, naming the tensor and element,
// whether the whole model or only a rank's slice holding it is read; a slice
// without it reads as before. Both two-byte and fp32 files.
TEST(HfIoTest, NonFiniteWeightsAreRefusedNamingTheTensor) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
      LlamaConfig c = Small(false);
      ParamLayout l = ParamLayout::ForLlama(c);
      auto units = RandomUnits(l);
      const int u = l.block_unit(1);
      const TensorSpec& t = l.units[u].tensors[kV];
      units[u][t.offset + 7] = bad;
      std::string d = Dir(std::string("nonfinite_") + DTypeName(dt));
      ASSERT_TRUE(Export(d, c, units, dt).ok());
      std::vector<std::vector<float>> back;
      Status st = LoadHfWeights(d, l, &back);
      ASSERT_FALSE(st.ok());
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find("tensor '" + t.hf_name + "' holds " + (std::isnan(bad) ? "NaN" : "inf") +
                                  " at element 7 of " + std::to_string(t.numel)),
                std::string::npos)
          << st.ToString();
      auto w = HfWeights::Open(d);
      ASSERT_TRUE(w.ok());
      std::vector<float> slice(l.units[u].numel);
      EXPECT_FALSE(ReadHfUnitRange(*w, l.units[u], t.offset, t.offset + 8, slice.data()).ok());
      EXPECT_TRUE(ReadHfUnitRange(*w, l.units[u], 0, t.offset + 7, slice.data()).ok()) << "the slice before it";
    }
  }
}

}  // namespace
}  // namespace shard
