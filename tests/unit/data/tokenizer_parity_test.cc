// Token-for-token parity with the reference implementations on real tokenizers:
// Llama-3 and Qwen3 byte-level BPE and a Llama-2-style SentencePiece BPE vocabulary
// (HF tokenizer.json, reference @huggingface/tokenizers, checked against
// transformers.js), the same vocabulary as a SentencePiece .model and a small
// trained .model (reference: python3-sentencepiece). The corpus covers unicode,
// whitespace runs, numbers, special tokens, long words and byte fallback; the
// golden ids come from tests/unit/data/make_tokenizer_goldens.sh.
#include <gtest/gtest.h>

#include <filesystem>

#include "shard/data/tokenizer.h"
#include "tests/unit/data/data_test_util.h"

namespace shard {
namespace {

using testing_data::GoldenPath;

struct ParityCase {
  const char* name;
  const char* golden;  // file under tests/testdata/tokenizers
  std::string (*path)();
  bool roundtrip;      // Decode(Encode(text)) == text for every case
};

std::string Llama3() { return testing_data::NpmTokenizerJson("llama3"); }
std::string Qwen3() { return testing_data::NpmTokenizerJson("qwen3"); }
std::string Llama2Json() { return testing_data::NpmTokenizerJson("llama2"); }
std::string Llama2Model() { return testing_data::TokenizerDir() + "/llama2.model"; }
std::string SmallModel() { return GoldenPath("sp_small.model"); }

// Test names in ctest: the case name, not the struct's bytes.
void PrintTo(const ParityCase& c, std::ostream* os) { *os << c.name; }

class TokenizerParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(TokenizerParityTest, MatchesReferenceIds) {
  const ParityCase& c = GetParam();
  const std::string path = c.path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << ": " << testing_data::kFetchHint;
  auto tok = LoadTokenizer(path);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const auto golden = testing_data::ReadJson(GoldenPath(c.golden));
  int checked = 0, wrong = 0;
  for (const auto& k : golden["cases"]) {
    const std::string text = k["text"].get<std::string>();
    const auto want = k["ids"].get<std::vector<int32_t>>();
    const auto got = (*tok)->Encode(text);
    ++checked;
    if (got != want) {
      ++wrong;
      if (wrong <= 8) ADD_FAILURE() << c.name << ": " << testing::PrintToString(text) << "\n  got  " << testing::PrintToString(got)
                                    << "\n  want " << testing::PrintToString(want);
    }
    if (c.roundtrip && got == want) {
      EXPECT_EQ((*tok)->Decode(got), text) << c.name;
    }
  }
  EXPECT_EQ(wrong, 0) << c.name << ": " << wrong << " of " << checked << " cases differ from the reference";
  EXPECT_GT(checked, 200);
}

INSTANTIATE_TEST_SUITE_P(Real, TokenizerParityTest,
                         ::testing::Values(ParityCase{"llama3", "llama3.json", Llama3, true},
                                           ParityCase{"qwen3", "qwen3.json", Qwen3, false},
                                           ParityCase{"llama2_json", "llama2.json", Llama2Json, false},
                                           ParityCase{"llama2_sp", "llama2_sp.json", Llama2Model, false},
                                           ParityCase{"sp_small", "sp_small.json", SmallModel, false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TokenizerParityTest, SpecialTokensAndMetadata) {
  const std::string path = Llama3();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << ": " << testing_data::kFetchHint;
  auto tok = LoadTokenizer(path);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->kind(), "hf-bpe");
  EXPECT_EQ((*tok)->TokenId("<|begin_of_text|>"), 128000);
  EXPECT_EQ((*tok)->TokenId("<|eot_id|>"), 128009);
  EXPECT_EQ((*tok)->bos_id(), 128000);
  EXPECT_EQ((*tok)->vocab_size(), 128256);
  EXPECT_FALSE((*tok)->adds_dummy_prefix());
  EXPECT_FALSE((*tok)->TokenId("<|no such token|>").has_value());
}

TEST(TokenizerParityTest, SentencePieceByteFallbackAndPrefix) {
  auto tok = LoadTokenizer(SmallModel());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->kind(), "sentencepiece");
  EXPECT_TRUE((*tok)->adds_dummy_prefix());
  EXPECT_EQ((*tok)->TokenId("<s>"), (*tok)->bos_id());
  EXPECT_EQ((*tok)->TokenId("</s>"), (*tok)->eos_id());
  // A character outside the small vocabulary becomes its UTF-8 bytes (<0xE9>...).
  const auto ids = (*tok)->Encode("龘");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ((*tok)->Decode(ids), "龘");
}

}  // namespace
}  // namespace shard
