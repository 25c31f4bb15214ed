// JSONL rows, bad-row policies, the prepared format (written, memory-mapped,
// validated on open against corruption) and shardctl prepare-data's function.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "coordinator/ctl/prepare_data_command.h"
#include "shard/common/file_util.h"
#include "shard/data/byte_tokenizer.h"
#include "shard/data/prepare_sft.h"
#include "shard/data/prepared_dataset.h"
#include "shard/data/sft_jsonl.h"
#include "tests/unit/data/data_test_util.h"

namespace shard {
namespace {

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

TEST(SftJsonlTest, ParsesBothRowFormats) {
  auto m = ParseSftRow(R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},)"
                       R"({"role":"assistant","content":"a"}],"id":7})");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].role, Role::kSystem);
  EXPECT_EQ((*m)[2].content, "a");
  m = ParseSftRow(R"({"prompt":"p","response":"r","system":"sys"})");
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[1].role, Role::kUser);
  EXPECT_EQ((*m)[2].role, Role::kAssistant);
  EXPECT_EQ((*m)[2].content, "r");
}

TEST(SftJsonlTest, BadRowsSayWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages": [)", "not valid JSON"},
      {R"([1,2])", "must be a JSON object"},
      {R"({"text":"x"})", "needs \"messages\" or \"prompt\" and \"response\""},
      {R"({"messages":"hi"})", "\"messages\" must be an array"},
      {R"({"messages":[]})", "\"messages\" is empty"},
      {R"({"messages":[{"role":"user"}]})", "messages[0] has no string \"content\""},
      {R"({"messages":[{"content":"x"}]})", "messages[0] has no string \"role\""},
      {R"({"messages":[{"role":"tool","content":"x"}]})", "role 'tool' is not system, user or assistant"},
      {R"({"prompt":"p"})", "no string \"response\""},
      {R"({"prompt":1,"response":"r"})", "no string \"prompt\""},
      // Found by fuzz_jsonl_row: a number past a double's range threw out of
      // the reader (std::terminate) instead of refusing the row.
      {R"({"response":575804e1111111111111111111111111})", "not valid JSON: number overflow"},
  };
  // Issue 28 item 3: rows are bounded in depth before they are parsed.
  const std::string deep = R"({"prompt":"p","response":"r","meta":)" + std::string(200000, '[') + std::string(200000, ']') + "}";
  auto d = ParseSftRow(deep);
  EXPECT_EQ(d.status().message(), "JSON nested deeper than 512 levels");
  for (const auto& [row, want] : cases) {
    auto m = ParseSftRow(row);
    ASSERT_FALSE(m.ok()) << row;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(want), std::string::npos) << row << " -> " << m.status().message();
  }
}

// Found by fuzz_prepared_header: 8.3e28 was cast to int64 (undefined behaviour).
TEST(PreparedHeaderTest, NonIntegerCountsAreRefused) {
  PreparedHeader h;
  h.tokenizer_kind = "byte", h.chat_template = "chatml", h.train_on = "assistant", h.num_samples = 1;
  h.num_tokens = 4, h.num_target_tokens = 2, h.vocab_size = 259, h.max_token_id = 100, h.seq_len = 16;
  const std::string good = h.ToJson();
  ASSERT_TRUE(PreparedHeader::FromJson(good, "p.json").ok()) << PreparedHeader::FromJson(good, "p.json").status().ToString();
  for (const char* bad : {"8.33333e+28", "1.5", "18446744073709551615"}) {
    nlohmann::json j = nlohmann::json::parse(good);
    j["num_tokens"] = nlohmann::json::parse(bad);
    auto r = PreparedHeader::FromJson(j.dump(), "p.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("p.json"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("expected an integer"), std::string::npos) << r.status().ToString();
  }
  // The optional counts too (found by fuzz_prepared_header again, session 9:
  // rows.read 4.6e105 went through nlohmann's value(key, 0), the same cast).
  for (const auto& [path, bad] : std::vector<std::pair<std::vector<std::string>, const char*>>{
           {{"rows", "read"}, "4.5e105"}, {{"rows", "bad_skipped"}, "1.5"}, {{"source", "bytes"}, "-2.5e30"},
           {{"longer_than_seq_len"}, "1e300"}}) {
    nlohmann::json j = nlohmann::json::parse(good);
    nlohmann::json* at = &j;
    for (size_t i = 0; i + 1 < path.size(); ++i) at = &(*at)[path[i]];
    (*at)[path.back()] = nlohmann::json::parse(bad);
    auto r = PreparedHeader::FromJson(j.dump(), "p.json");
    ASSERT_FALSE(r.ok()) << path.back() << " " << bad;
    EXPECT_NE(r.status().message().find(path.back() + ": expected an integer"), std::string::npos) << r.status().ToString();
  }
}

class PrepareTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing_data::TempDir("prepare"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  PrepareSftOptions Options(const std::string& jsonl) {
    PrepareSftOptions o;
    o.input = dir_ + "/in.jsonl";
    WriteText(o.input, jsonl);
    o.out = dir_ + "/out/ds";
    o.seq_len = 16;
    o.chat_template = "plain";
    o.threads = 2;
    return o;
  }
  std::string dir_;
};

constexpr const char* kRows =
    R"({"prompt":"1+1=","response":"2"})"
    "\n\n"
    R"({"messages":[{"role":"user","content":"abc"},{"role":"assistant","content":"cba"}]})"
    "\n"
    R"({"prompt":"a very long prompt that does not fit","response":"ok"})"
    "\n";

TEST_F(PrepareTest, WritesAValidatedDataset) {
  auto o = Options(kRows);
  auto r = PrepareSftData(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->header.num_samples, 3);
  EXPECT_EQ(r->header.rows_read, 3);
  EXPECT_EQ(r->header.longer_than_seq_len, 1);
  auto ds = PreparedDataset::Open(o.out);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ByteTokenizer tok;
  EXPECT_EQ(ds->header().tokenizer_hash, tok.hash());
  EXPECT_EQ(ds->header().chat_template, "plain");
  // Sample 0: <s> "1+1=" "2" </s>; targets are "2" and </s>.
  SampleView v = ds->sample(0);
  ASSERT_EQ(v.length, 7);
  EXPECT_EQ(v.tokens[0], 256u);
  EXPECT_EQ(v.tokens[5], static_cast<uint32_t>('2'));
  EXPECT_EQ(v.tokens[6], 257u);
  EXPECT_EQ(std::vector<uint8_t>(v.mask, v.mask + 7), (std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(ds->header().num_target_tokens, 2 + 4 + 3);
  EXPECT_TRUE(ds->CheckVocab(512).ok());
  EXPECT_EQ(ds->CheckVocab(100).code(), StatusCode::kInvalidArgument);  // no retry helps
  auto cur = PreparedIsCurrent(o, tok);
  ASSERT_TRUE(cur.ok());
  EXPECT_TRUE(*cur);
  PrepareSftOptions changed = o;
  changed.seq_len = 32;
  EXPECT_FALSE(*PreparedIsCurrent(changed, tok));
  WriteText(o.input, std::string(kRows) + R"({"prompt":"x","response":"y"})" + "\n");
  EXPECT_FALSE(*PreparedIsCurrent(o, tok)) << "a changed input must be prepared again";
}

TEST_F(PrepareTest, BadRowPolicies) {
  const std::string rows = std::string(kRows) + R"({"prompt":"x"})" + "\n" + "not json\n" +
                           R"({"messages":[{"role":"user","content":"no reply"}]})" + "\n";
  auto o = Options(rows);
  auto r = PrepareSftData(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("in.jsonl:5: no string \"response\""), std::string::npos) << r.status().message();
  EXPECT_FALSE(std::filesystem::exists(o.out + ".json")) << "a failed run leaves no dataset";
  EXPECT_FALSE(std::filesystem::exists(o.out + ".tokens.tmp")) << "nor temp files";
  o.bad_rows = BadRows::kSkip;
  r = PrepareSftData(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->header.bad_rows_skipped, 3);
  EXPECT_EQ(r->header.num_samples, 3);
  ASSERT_EQ(r->bad_rows.size(), 3u);
  EXPECT_NE(r->bad_rows[1].find("in.jsonl:6: not valid JSON"), std::string::npos) << r->bad_rows[1];
  EXPECT_NE(r->bad_rows[2].find("in.jsonl:7: no assistant message"), std::string::npos) << r->bad_rows[2];
  o.train_on = TrainOn::kAll;  // a conversation without a reply is then trainable
  r = PrepareSftData(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->header.bad_rows_skipped, 2);
}

// Issue 28 item 3: a template that never ends spun until the job's hang
// timeout blamed a rank. Now the row fails with the template's file and line,
// as bad input (INVALID_ARGUMENT: a job's worker exits "can never run", 2).
TEST_F(PrepareTest, ATemplateThatSpinsFailsThePrepareAsBadInput) {
  const std::string tok = dir_ + "/tok";
  std::filesystem::create_directories(tok);
  WriteText(tok + "/tokenizer.json", R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]}})");
  WriteText(tok + "/tokenizer_config.json",
            nlohmann::json{{"chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}\n"
                                             "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                                             "{% endfor %}"}}
                .dump());
  auto o = Options(R"({"prompt":"1+1=","response":"2"})" "\n");
  o.tokenizer = tok;
  o.chat_template = "auto";
  auto r = PrepareSftData(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("in.jsonl:1: " + tok + "/tokenizer_config.json: template line 2: the template ran "
                                      "past its step budget"),
            std::string::npos)
      << r.status().message();
}

TEST_F(PrepareTest, OpenRejectsCorruptFiles) {
  auto o = Options(kRows);
  ASSERT_TRUE(PrepareSftData(o).ok());
  const PreparedPaths p(o.out);
  auto read = [](const std::string& f) { return *ReadFileToString(f); };
  const std::string tokens = read(p.tokens), mask = read(p.mask), index = read(p.index), header = read(p.header);
  auto expect_error = [&](StatusCode code, const std::string& needle) {
    auto ds = PreparedDataset::Open(o.out);
    ASSERT_FALSE(ds.ok()) << needle;
    EXPECT_EQ(ds.status().code(), code) << ds.status().ToString();
    EXPECT_NE(ds.status().message().find(needle), std::string::npos) << ds.status().message();
  };
  WriteText(p.tokens, tokens.substr(0, tokens.size() - 4));
  expect_error(StatusCode::kDataLoss, "4 bytes per token");
  WriteText(p.tokens, tokens);
  std::string bad_mask = mask;
  bad_mask[3] = 2;
  WriteText(p.mask, bad_mask);
  expect_error(StatusCode::kDataLoss, "not 0 or 1");
  WriteText(p.mask, mask);
  std::string bad_index = index;
  bad_index[8] = 1;  // sample 0 ends after token 1: shorter than 2 tokens
  WriteText(p.index, bad_index);
  expect_error(StatusCode::kDataLoss, "shorter than 2 tokens");
  WriteText(p.index, index);
  std::string bad_tokens = tokens;
  bad_tokens[1] = 0x7f;  // token 0 becomes 0x7f00 + ..., beyond the byte vocabulary
  WriteText(p.tokens, bad_tokens);
  expect_error(StatusCode::kDataLoss, "outside the tokenizer's vocabulary");
  WriteText(p.tokens, tokens);
  std::string v2 = header;
  v2.replace(v2.find("\"version\": 1"), 12, "\"version\": 2");
  WriteText(p.header, v2);
  expect_error(StatusCode::kInvalidArgument, "format version 2");
  WriteText(p.header, "{\"format\": \"other\"}");
  expect_error(StatusCode::kDataLoss, "not a shardd prepared-dataset header");
  std::filesystem::remove(p.header);
  expect_error(StatusCode::kNotFound, "run shardctl prepare-data first");
  WriteText(p.header, header);
  EXPECT_TRUE(PreparedDataset::Open(o.out).ok());
}

// Issue 18 item 4: `prepare-data --input X.json --out X` replaced the user's
// dataset with the header. No output may resolve to an input — by the same
// name, through a symlinked folder, as a hard link, or a tokenizer file.
TEST_F(PrepareTest, OutputsNeverReplaceAnInput) {
  auto o = Options(kRows);
  o.input = dir_ + "/p.json";
  WriteText(o.input, kRows);
  auto refused = [&](const PrepareSftOptions& opts, const std::string& victim) {
    auto r = PrepareSftData(opts);
    ASSERT_FALSE(r.ok()) << opts.out;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find("would overwrite the input"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(victim), std::string::npos) << r.status().message();
    EXPECT_EQ(*ReadFileToString(opts.input), kRows) << "the input was changed";
  };
  PrepareSftOptions same = o;
  same.out = dir_ + "/p";  // p.json is both the input and the header
  refused(same, "p.json");
  // The job path: data.jsonl: p.json + data.prepared: p.
  auto ensured = EnsurePrepared(same);
  ASSERT_FALSE(ensured.ok());
  EXPECT_NE(ensured.status().message().find("would overwrite the input"), std::string::npos);
  EXPECT_EQ(*ReadFileToString(o.input), kRows);
  std::filesystem::create_directory_symlink(dir_, dir_ + "/link");
  PrepareSftOptions via_link = o;
  via_link.out = dir_ + "/link/p";
  refused(via_link, "p.json");
  std::filesystem::create_hard_link(o.input, dir_ + "/hard.json");
  PrepareSftOptions via_hard_link = o;
  via_hard_link.out = dir_ + "/hard";
  refused(via_hard_link, "p.json");
  PrepareSftOptions over_tokenizer = o;
  over_tokenizer.tokenizer = dir_ + "/tok.index";
  std::filesystem::copy_file(testing_data::GoldenPath("sp_small.model"), over_tokenizer.tokenizer);
  over_tokenizer.out = dir_ + "/tok";
  refused(over_tokenizer, "tok.index");
  EXPECT_EQ(*ReadFileToString(over_tokenizer.tokenizer),
            *ReadFileToString(testing_data::GoldenPath("sp_small.model")));
  PrepareSftOptions fine = o;
  fine.out = dir_ + "/prepared/p";
  EXPECT_TRUE(PrepareSftData(fine).ok()) << "an output beside, not over, the input is fine";
}

// Issue 18 item 4: a token flipped to another valid id was trained on. The
// header carries each file's xxh64: opening the dataset says so, and a job
// reusing the cache prepares it again from the input instead.
TEST_F(PrepareTest, AFlippedTokenIsCaughtAndTheCacheIsPreparedAgain) {
  auto o = Options(kRows);
  ASSERT_TRUE(PrepareSftData(o).ok());
  const PreparedPaths p(o.out);
  const std::string tokens = *ReadFileToString(p.tokens);
  std::string flipped = tokens;
  const size_t at = 4 * 5;  // sample 0's "2"
  ASSERT_EQ(flipped[at], '2');
  flipped[at] = '3';  // still a valid byte token: only the checksum can tell
  WriteText(p.tokens, flipped);
  auto ds = PreparedDataset::Open(o.out);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ds.status().message().find(p.tokens + " fails its checksum"), std::string::npos) << ds.status().message();
  ByteTokenizer tok;
  EXPECT_FALSE(*PreparedIsCurrent(o, tok)) << "a damaged cache is not current";
  auto again = EnsurePrepared(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(*again) << "prepared again from the input";
  EXPECT_EQ(*ReadFileToString(p.tokens), tokens);
  EXPECT_TRUE(PreparedDataset::Open(o.out).ok());
  // A header from before checksums (no "files") still opens, but a job does
  // not reuse it: it is prepared again, with checksums.
  auto old = nlohmann::json::parse(*ReadFileToString(p.header));
  old.erase("files");
  WriteText(p.header, old.dump());
  EXPECT_TRUE(PreparedDataset::Open(o.out).ok());
  EXPECT_FALSE(*PreparedIsCurrent(o, tok));
}

TEST_F(PrepareTest, ThreadsDoNotChangeTheOutputAndReuseWorks) {
  std::string rows;
  for (int i = 0; i < 700; ++i)  // several batches of lines, a real (SentencePiece) tokenizer
    rows += R"({"messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"Question )" +
            std::to_string(i) + R"( about the model?"},{"role":"assistant","content":"The answer is )" +
            std::to_string(i * 7) + R"(, café."}]})" + "\n";
  auto o = Options(rows);
  o.tokenizer = testing_data::GoldenPath("sp_small.model");
  o.chat_template = "llama2";
  o.threads = 1;
  ASSERT_TRUE(PrepareSftData(o).ok());
  const PreparedPaths p(o.out);
  const std::string one = *ReadFileToString(p.tokens) + *ReadFileToString(p.mask) + *ReadFileToString(p.index);
  o.threads = 3;
  auto r = EnsurePrepared(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(*r) << "unchanged input, tokenizer and options: reused";
  std::filesystem::remove(p.header);
  r = EnsurePrepared(o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_EQ(*ReadFileToString(p.tokens) + *ReadFileToString(p.mask) + *ReadFileToString(p.index), one);
  auto ds = PreparedDataset::Open(o.out);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->num_samples(), 700);
  EXPECT_EQ(ds->header().tokenizer_kind, "sentencepiece");
}

TEST_F(PrepareTest, ShardctlPrepareDataFunction) {
  auto o = Options(kRows);
  shardctl::PrepareDataOptions c;
  c.input = o.input;
  c.tokenizer = "byte";
  c.chat_template = "chatml";
  c.seq_len = 64;
  c.out = dir_ + "/cli/ds";
  c.bad_rows = BadRows::kSkip;
  ASSERT_TRUE(shardctl::RunPrepareData(c).ok());
  auto ds = PreparedDataset::Open(c.out);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->header().chat_template, "chatml");
  EXPECT_EQ(ds->header().num_samples, 3);
  c.chat_template = "vicuna";
  auto st = shardctl::RunPrepareData(c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  c.chat_template = "plain";
  c.tokenizer = dir_ + "/missing.json";
  EXPECT_EQ(shardctl::RunPrepareData(c).code(), StatusCode::kNotFound);
  c.tokenizer = "byte";
  c.seq_len = 0;
  EXPECT_EQ(shardctl::RunPrepareData(c).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shard

namespace shard {
namespace {

TEST(SftJsonlTest, AlpacaAndShareGptRows) {
  auto a = ParseSftRow(R"({"instruction":"Sum","input":"2 and 2","output":"4","system":"S"})");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), 3u);
  EXPECT_EQ((*a)[0].role, Role::kSystem);
  EXPECT_EQ((*a)[1].content, "Sum\n\n2 and 2");
  EXPECT_EQ((*a)[2].content, "4");
  auto a2 = ParseSftRow(R"({"instruction":"Hi","input":"","output":"Yo"})", SftFormat::kAlpaca);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ((*a2)[0].content, "Hi");
  auto s = ParseSftRow(R"({"conversations":[{"from":"system","value":"S"},{"from":"human","value":"Q"},)"
                       R"({"from":"gpt","value":"A"}]})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[1].role, Role::kUser);
  EXPECT_EQ((*s)[2].role, Role::kAssistant);
  EXPECT_EQ((*s)[2].content, "A");
  const std::pair<const char*, const char*> bad[] = {
      {R"({"instruction":"x"})", "no string \"output\" (alpaca)"},
      {R"({"instruction":"x","input":3,"output":"y"})", "\"input\" must be a string"},
      {R"({"conversations":[{"from":"bot","value":"x"}]})", "\"from\" 'bot' is not human, gpt or system"},
      {R"({"conversations":[{"from":"gpt"}]})", "conversations[0] has no string \"value\""},
      {R"({"conversations":[]})", "\"conversations\" is empty"},
  };
  for (const auto& [row, want] : bad) {
    auto m = ParseSftRow(row);
    ASSERT_FALSE(m.ok()) << row;
    EXPECT_NE(m.status().message().find(want), std::string::npos) << row << " -> " << m.status().message();
  }
  auto wrong = ParseSftRow(R"({"messages":[{"role":"user","content":"x"}]})", SftFormat::kAlpaca);
  EXPECT_NE(wrong.status().message().find("this row is in the messages format, but the file is alpaca"),
            std::string::npos)
      << wrong.status().message();
  EXPECT_FALSE(ParseSftFormat("csv").ok());
}

TEST(SftJsonlTest, PrepareReadsEachFormatAndRefusesMixedFiles) {
  const std::string dir = testing_data::TempDir("formats");
  const std::pair<const char*, std::string> files[] = {
      {"alpaca", R"({"instruction":"Reverse","input":"abc","output":"cba"})"},
      {"sharegpt", R"({"conversations":[{"from":"human","value":"Reverse abc"},{"from":"gpt","value":"cba"}]})"},
  };
  for (const auto& [name, row] : files) {
    const std::string in = dir + "/" + name + ".jsonl";
    std::ofstream(in) << row << "\n" << row << "\n";
    PrepareSftOptions o;
    o.input = in;
    o.seq_len = 64;
    o.out = dir + "/" + name;
    auto r = PrepareSftData(o);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_EQ(r->header.num_samples, 2) << name;
    EXPECT_EQ(r->header.num_target_tokens, 2 * 4) << name;  // "cba" + EOS (plain template, byte tokenizer)
  }
  const std::string mixed = dir + "/mixed.jsonl";
  std::ofstream(mixed) << files[0].second << "\n\n" << files[1].second << "\n";
  PrepareSftOptions o;
  o.input = mixed;
  o.seq_len = 64;
  o.out = dir + "/mixed";
  auto r = PrepareSftData(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mixed.jsonl:3: this row is in the sharegpt format, but the file is alpaca"),
            std::string::npos)
      << r.status().message();
  o.format = SftFormat::kShareGpt;
  o.input = dir + "/sharegpt.jsonl";
  EXPECT_TRUE(PrepareSftData(o).ok());
  o.format = SftFormat::kAlpaca;
  EXPECT_FALSE(PrepareSftData(o).ok());
}

}  // namespace
}  // namespace shard
