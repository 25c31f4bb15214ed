// Tokenizer pieces that run without fetched files: the hand-written split
// patterns (expected pieces from JavaScript's RegExp with \p{L}/\p{N}), the byte
// tokenizer, loading errors that name the component, and byte-level BPE on a
// small hand-made tokenizer.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "shard/data/byte_tokenizer.h"
#include "shard/data/hf_tokenizer.h"
#include "shard/data/pretokenizer.h"
#include "tests/unit/data/data_test_util.h"

namespace shard {
namespace {

std::vector<std::string> Split(SplitPattern p, const std::string& text) {
  std::vector<std::pair<uint32_t, uint32_t>> r;
  SplitText(p, text, &r);
  std::vector<std::string> out;
  for (auto [b, e] : r) out.push_back(text.substr(b, e - b));
  return out;
}

TEST(PreTokenizerTest, MatchesTheRegexes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Split(SplitPattern::kGpt2, "Hello world's  123 !!\n\n x"),
            (V{"Hello", " world", "'s", " ", " 123", " !!", "\n\n", " x"}));
  EXPECT_EQ(Split(SplitPattern::kCl100k, "Hello world's  123 !!\n\n x"),
            (V{"Hello", " world", "'s", " ", " ", "123", " !!\n\n", " x"}));
  EXPECT_EQ(Split(SplitPattern::kGpt2, "I'M 12345 ..\n\n  \tfoo()\r\n"),
            (V{"I", "'", "M", " 12345", " ..", "\n\n  ", "\t", "foo", "()", "\r\n"}));
  EXPECT_EQ(Split(SplitPattern::kCl100k, "I'M 12345 ..\n\n  \tfoo()\r\n"),
            (V{"I", "'M", " ", "123", "45", " ..\n\n", "  ", "\tfoo", "()\r\n"}));
  EXPECT_EQ(Split(SplitPattern::kQwen2, "x 12345"), (V{"x", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(Split(SplitPattern::kCl100k, "naïve 東京\u3000ok"), (V{"naïve", " 東京", "\u3000ok"}));
  EXPECT_TRUE(Split(SplitPattern::kCl100k, "").empty());
  auto bad = SplitPatternFromRegex("\\w+");
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
}

TEST(ByteTokenizerTest, BytesAndSpecials) {
  ByteTokenizer t;
  EXPECT_EQ(t.Encode("hé"), (std::vector<int32_t>{'h', 0xC3, 0xA9}));
  EXPECT_EQ(t.Decode(std::vector<int32_t>{256, 'a', 257}), "<s>a</s>");
  EXPECT_EQ(t.TokenId("<|im_end|>"), 264);
  EXPECT_EQ(t.vocab_size(), 265);
  EXPECT_LE(t.vocab_size(), 512) << "fits the tiny preset";
  auto loaded = LoadTokenizer("byte");
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ((*loaded)->hash(), t.hash());
}

// A byte-level BPE over "a", "b", "c", " " with merges ab, abc, " a".
std::string TinyJson(const std::string& model_type = "BPE", const std::string& extra_merge = "") {
  // Byte-level alphabet: ' ' is "Ġ".
  std::string s = R"({"version":"1.0","added_tokens":[{"id":9,"content":"<|x|>","special":true,"normalized":false}],
    "normalizer":null,
    "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},
    "decoder":{"type":"ByteLevel"},
    "model":{"type":")";
  s.append(model_type);
  s.append(R"(","vocab":{"a":0,"b":1,"c":2,"Ġ":3,"ab":4,"abc":5,"Ġa":6},"merges":["a b","ab c","Ġ a")");
  s.append(extra_merge);
  s.append("]}}");
  return s;
}

TEST(HfTokenizerTest, TinyByteLevelBpe) {
  auto t = HfTokenizer::Parse(TinyJson(), "", "tiny.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // " ab" is Ġ a b: "a b" (rank 0) merges before "Ġ a" (rank 2), leaving Ġ + ab.
  EXPECT_EQ((*t)->Encode("abc ab cab<|x|>a"), (std::vector<int32_t>{5, 3, 4, 3, 2, 4, 9, 0}));
  EXPECT_EQ((*t)->Encode(" a"), (std::vector<int32_t>{6}));
  EXPECT_EQ((*t)->Decode((*t)->Encode("abc ab")), "abc ab");
  EXPECT_EQ((*t)->vocab_size(), 10);
  EXPECT_EQ((*t)->TokenId("<|x|>"), 9);
}

// Issue 18 item 5: one huge id in a small tokenizer.json made prepare-data
// abort (2147483647: int overflow) or allocate 22 GB (5000000000); bounded ids
// are refused before anything is sized from them.
TEST(HfTokenizerTest, RefusesIdsThatWouldExhaustMemory) {
  for (const std::string id : {"2147483647", "5000000000", "-1", "70000", "16777216", "1.5", "\"7\""}) {
    SCOPED_TRACE(id);
    std::string vocab = TinyJson();
    vocab.replace(vocab.find(R"("abc":5)"), 7, R"("abc":)" + id);
    auto t = HfTokenizer::Parse(vocab, "", "huge.json");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
    EXPECT_NE(t.status().message().find("huge.json: vocabulary piece 'abc' has"), std::string::npos)
        << t.status().message();
    std::string added = TinyJson();
    added.replace(added.find(R"("id":9)"), 6, R"("id":)" + id);
    t = HfTokenizer::Parse(added, "", "added.json");
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("added.json: added token '<|x|>' has"), std::string::npos)
        << t.status().message();
  }
  // Gaps inside the bound are fine (reserved ids).
  std::string gap = TinyJson();
  gap.replace(gap.find(R"("id":9)"), 6, R"("id":60000)");
  auto t = HfTokenizer::Parse(gap, "", "gap.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->vocab_size(), 60001);
}

// Found by fuzz_tokenizer_json: a vocabulary piece shaped like a byte
// fallback but not hex ("<0xZZ>") made Decode throw out of std::stoi.
TEST(HfTokenizerTest, NonHexByteFallbackPiecesDecodeAsText) {
  const std::string json = R"({"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":null,
    "decoder":null,"model":{"type":"BPE","byte_fallback":true,
    "vocab":{"<0xZZ>":0,"<0x41>":1,"a":2},"merges":[]}})";
  auto t = HfTokenizer::Parse(json, "", "tok.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->Decode(std::vector<int32_t>{1, 0, 2}), "A<0xZZ>a");
  // An id past int32 is refused by name, not wrapped.
  auto big = HfTokenizer::Parse(R"({"model":{"type":"BPE","vocab":{"a":4294967296},"merges":[]}})", "", "tok.json");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("has id 4294967296, outside"), std::string::npos) << big.status().ToString();
}

// Issue 28 item 3: a 100,000-deep normalizer Sequence recursed off the end of
// the stack at load (SIGSEGV); a chain of Replace steps that each double the
// text multiplied it past memory at the first Encode.
TEST(HfTokenizerTest, NestedAndGrowingTextPipelinesAreRefusedAtLoad) {
  auto with = [](const std::string& field, const std::string& value) {
    std::string s = TinyJson();
    const std::string from = "\"" + field + "\":" + (field == "normalizer" ? std::string("null") : "");
    if (field == "normalizer") return s.replace(s.find(from), from.size(), "\"normalizer\":" + value);
    const size_t at = s.find("\"" + field + "\":");
    const size_t end = s.find('}', at) + 1;
    return s.replace(at, end - at, "\"" + field + "\":" + value);
  };
  auto nest = [](const char* key, int levels, const std::string& inner) {
    std::string s;
    for (int i = 0; i < levels; ++i) s += std::string(R"({"type":"Sequence",")") + key + R"(":[)";
    s += inner;
    for (int i = 0; i < levels; ++i) s += "]}";
    return s;
  };
  auto refused = [](const std::string& json, const std::string& want) {
    auto t = HfTokenizer::Parse(json, "", "tok.json");
    ASSERT_FALSE(t.ok()) << want;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
    EXPECT_NE(t.status().message().find(want), std::string::npos) << t.status().message();
  };
  const std::string nfc = R"({"type":"NFC"})";
  refused(with("normalizer", nest("normalizers", 100000, nfc)), "tok.json: JSON nested deeper than 512 levels");
  refused(with("normalizer", nest("normalizers", 100, nfc)), "tok.json: normalizer Sequences nested deeper than 8 levels");
  refused(with("pre_tokenizer", nest("pretokenizers", 100, R"({"type":"ByteLevel"})")),
          "tok.json: pre-tokenizer Sequences nested deeper than 8 levels");
  refused(with("decoder", nest("decoders", 100, R"({"type":"ByteLevel"})")), "tok.json: decoder Sequences nested deeper");
  std::string doubling;
  for (int i = 0; i < 50; ++i) doubling += std::string(i ? "," : "") + R"({"type":"Replace","pattern":{"String":"a"},"content":"aa"})";
  refused(with("normalizer", nest("normalizers", 1, doubling)), "grow 1125899906842624-fold (at most 64)");
  refused(with("normalizer", R"({"type":"Prepend","prepend":")" + std::string(5000, 'x') + R"("})"),
          "longer by 5000 bytes (at most 4096)");
  // What real tokenizers do (Llama-2: Prepend "▁", then " " → "▁") loads and encodes.
  auto llama2 = HfTokenizer::Parse(with("normalizer", nest("normalizers", 1,
                                                           R"({"type":"Prepend","prepend":"\u2581"},)"
                                                           R"({"type":"Replace","pattern":{"String":" "},"content":"\u2581"})")),
                                   "", "tok.json");
  ASSERT_TRUE(llama2.ok()) << llama2.status().ToString();
  EXPECT_FALSE((*llama2)->Encode("ab c").empty());
}

TEST(HfTokenizerTest, RefusesWhatItCannotDo) {
  auto t = HfTokenizer::Parse(TinyJson("WordPiece"), "", "wp.json");
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("model type WordPiece"), std::string::npos) << t.status().message();
  t = HfTokenizer::Parse(TinyJson("BPE", R"(,"c q")"), "", "bad.json");
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("bad.json: merge 3"), std::string::npos) << t.status().message();
  t = HfTokenizer::Parse("{not json", "", "broken.json");
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  std::string digits = TinyJson();
  const std::string from = R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
  digits.replace(digits.find(from), from.size(), R"({"type":"Digits","individual_digits":true})");
  t = HfTokenizer::Parse(digits, "", "digits.json");
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("pre-tokenizer Digits"), std::string::npos) << t.status().message();
  auto missing = LoadTokenizer(testing_data::TempDir("tok") + "/nothing.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto notsp = LoadTokenizer(testing_data::GoldenPath("sp_small.json"));
  EXPECT_FALSE(notsp.ok()) << "a JSON golden is no tokenizer.json";
}

// Errors name the file and the part that is wrong: a list-valued vocab (not
// "encodes to fewer than 2 tokens" later), an empty one, and a broken
// tokenizer_config.json by its own name (not tokenizer.json's).
TEST(HfTokenizerTest, ErrorsNameTheFileAndPartThatIsWrong) {
  std::string list = TinyJson();
  const std::string from = R"("vocab":{"a":0,"b":1,"c":2,"Ġ":3,"ab":4,"abc":5,"Ġa":6})";
  ASSERT_NE(list.find(from), std::string::npos);
  list.replace(list.find(from), from.size(), R"("vocab":[["a",0.0],["b",-1.0]])");
  auto t = HfTokenizer::Parse(list, "", "dir/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("dir/tokenizer.json: model.vocab is a list; a BPE tokenizer.json maps each piece"),
            std::string::npos)
      << t.status().ToString();
  std::string empty = TinyJson();
  empty.replace(empty.find(from), from.size(), R"("vocab":{})");
  t = HfTokenizer::Parse(empty, "", "dir/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.vocab is empty"), std::string::npos) << t.status().ToString();
  t = HfTokenizer::Parse(TinyJson(), "{\"bos_token\": ", "dir/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().rfind("dir/tokenizer_config.json: ", 0), 0u) << t.status().ToString();
  EXPECT_TRUE(HfTokenizer::Parse(TinyJson(), R"({"bos_token": "a"})", "dir/tokenizer.json").ok());
}

}  // namespace
}  // namespace shard
