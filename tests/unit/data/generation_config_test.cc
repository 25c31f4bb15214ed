// generation_config.json's eos ids (shard/data/generation_config.h) are ids of
// the vocabulary or refused naming the file, never truncated; and what a
// training job's export takes along beside the weights (ExportJobTokenizer):
// a token-stream job from an HF folder passes on the folder's tokenizer files
// and generation_config.json as they are.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "shard/common/file_util.h"
#include "shard/data/generation_config.h"
#include "shard/data/tokenizer.h"
#include "shard/data/tokenizer_export.h"
#include "tests/unit/data/data_test_util.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string Read(const std::string& path) {
  auto s = ReadFileToString(path);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : "";
}

// A byte-level BPE of 10 ids (0..6 in the vocab, 9 a special token) with a
// tokenizer_config.json naming <|x|> its eos.
std::string TinyTokenizerFolder(const std::string& name) {
  const std::string dir = testing_data::TempDir(name);
  Write(dir + "/tokenizer.json",
        R"({"version":"1.0","added_tokens":[{"id":9,"content":"<|x|>","special":true,"normalized":false}],
            "normalizer":null,
            "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},
            "decoder":{"type":"ByteLevel"},
            "model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"Ġ":3,"ab":4,"abc":5,"Ġa":6},
                     "merges":["a b","ab c","Ġ a"]}})");
  Write(dir + "/tokenizer_config.json", R"({"eos_token": "<|x|>"})");
  return dir;
}

TEST(GenerationEosIds, ReadsAnIdAListOrNothing) {
  EXPECT_EQ(*GenerationEosIds(R"({"eos_token_id": 7})", "g.json", 10), std::vector<int32_t>{7});
  EXPECT_EQ(*GenerationEosIds(R"({"eos_token_id": [2, 9]})", "g.json", 10), (std::vector<int32_t>{2, 9}));
  EXPECT_TRUE(GenerationEosIds(R"({"eos_token_id": null})", "g.json", 10)->empty());
  EXPECT_TRUE(GenerationEosIds(R"({"temperature": 0.7})", "g.json", 10)->empty());
  EXPECT_EQ(*GenerationEosIds(R"({"eos_token_id": 2147483647})", "g.json", 0), std::vector<int32_t>{2147483647});
}

TEST(GenerationEosIds, IdsOutsideTheVocabularyOrInt32AreRefusedNamingTheFile) {
  struct Case {
    std::string text;
    int64_t vocab;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {R"({"eos_token_id": 10})", 10, "eos_token_id 10 is outside the vocabulary of 10 ids"},
      {R"({"eos_token_id": [2, 128009]})", 32000, "eos_token_id 128009 is outside the vocabulary of 32000 ids"},
      // 2^32 + 1 would read as 1 through int32: another token entirely.
      {R"({"eos_token_id": 4294967297})", 0, "eos_token_id 4294967297 is not a token id"},
      {R"({"eos_token_id": 4294967297})", 512, "outside the vocabulary of 512 ids"},
      {R"({"eos_token_id": 18446744073709551615})", 0, "18446744073709551615 is not a token id"},
      {R"({"eos_token_id": -1})", 10, "eos_token_id -1 is outside"},
      {R"({"eos_token_id": 2.5})", 10, "must be an id or a list of ids"},
      {R"({"eos_token_id": 1e400})", 10, "not valid JSON: [json.exception.out_of_range.406] number overflow"},
      {R"({"eos_token_id": ["2"]})", 10, "must be an id or a list of ids"},
      {R"([1, 2])", 10, "not a JSON object"},
  };
  for (const Case& c : cases) {
    auto ids = GenerationEosIds(c.text, "/m/generation_config.json", c.vocab);
    ASSERT_FALSE(ids.ok()) << c.text;
    EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(ids.status().message().find("/m/generation_config.json"), std::string::npos) << ids.status().ToString();
    EXPECT_NE(ids.status().message().find(c.needle), std::string::npos) << ids.status().ToString();
  }
}

// The export of a chat job merges the folder's eos ids: one outside the
// tokenizer's vocabulary is refused, not written truncated.
TEST(GenerationEosIds, ExportRefusesAnEosIdPastTheTokenizer) {
  const std::string src = TinyTokenizerFolder("gen_eos_src");
  const std::string out = testing_data::TempDir("gen_eos_out");
  Write(src + "/generation_config.json", R"({"eos_token_id": [4294967305]})");
  auto files = ExportTokenizerFiles(src, out);
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.status().message().find(src + "/generation_config.json: eos_token_id 4294967305"), std::string::npos)
      << files.status().ToString();
  EXPECT_FALSE(fs::exists(out + "/generation_config.json"));
  Write(src + "/generation_config.json", R"({"eos_token_id": [9], "temperature": 0.5})");
  files = ExportTokenizerFiles(src, out);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(testing_data::ReadJson(out + "/generation_config.json")["eos_token_id"], 9);
}

class ExportJobTokenizerTest : public ::testing::Test {
 protected:
  static DataConfig Tokens() {
    DataConfig d;
    d.tokens = "/data/tokens.bin";
    return d;
  }
};

TEST_F(ExportJobTokenizerTest, TokenStreamJobFromHfTakesTheFoldersFilesAsTheyAre) {
  const std::string hf = TinyTokenizerFolder("job_tok_hf");
  const std::string gen = R"({"bos_token_id": 0, "eos_token_id": [9, 3], "temperature": 0.7})";
  Write(hf + "/generation_config.json", gen);
  Write(hf + "/special_tokens_map.json", R"({"eos_token": "<|x|>"})");
  const std::string out = testing_data::TempDir("job_tok_out");
  auto files = ExportJobTokenizer(Tokens(), hf, /*model_vocab_size=*/512, out);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(*files, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                              "generation_config.json"}));
  for (const std::string& f : *files) EXPECT_EQ(Read(out + "/" + f), Read(hf + "/" + f)) << f;
  // The exported folder is a tokenizer folder again.
  auto a = LoadTokenizer(hf), b = LoadTokenizer(out);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->hash(), (*b)->hash());
}

TEST_F(ExportJobTokenizerTest, WeightsOnlyFolderPassesOnItsGenerationConfig) {
  const std::string hf = testing_data::TempDir("job_tok_weights_only");
  Write(hf + "/generation_config.json", R"({"eos_token_id": 2})");
  const std::string out = testing_data::TempDir("job_tok_weights_only_out");
  auto files = ExportJobTokenizer(Tokens(), hf, 512, out);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(*files, std::vector<std::string>{"generation_config.json"});
  // An eos id past the model's vocabulary is refused naming the file.
  Write(hf + "/generation_config.json", R"({"eos_token_id": 600})");
  auto bad = ExportJobTokenizer(Tokens(), hf, 512, out);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(hf + "/generation_config.json: eos_token_id 600 is outside the vocabulary of "
                                             "512 ids"),
            std::string::npos)
      << bad.status().ToString();
}

TEST_F(ExportJobTokenizerTest, NamedTokenizerWinsAndByteOrPresetWritesNothing) {
  const std::string hf = TinyTokenizerFolder("job_tok_named_hf");
  const std::string named = TinyTokenizerFolder("job_tok_named");
  Write(named + "/tokenizer_config.json", R"({"eos_token": "<|x|>", "model_max_length": 64})");
  DataConfig d = Tokens();
  d.tokenizer = named;
  const std::string out = testing_data::TempDir("job_tok_named_out");
  ASSERT_TRUE(ExportJobTokenizer(d, hf, 512, out).ok());
  EXPECT_EQ(Read(out + "/tokenizer_config.json"), Read(named + "/tokenizer_config.json"));
  d.tokenizer = "byte";
  const std::string none = testing_data::TempDir("job_tok_none");
  EXPECT_TRUE(ExportJobTokenizer(d, hf, 512, none)->empty());
  EXPECT_TRUE(ExportJobTokenizer(Tokens(), "", 512, none)->empty());
  EXPECT_TRUE(fs::is_empty(none));
}

}  // namespace
}  // namespace shard
