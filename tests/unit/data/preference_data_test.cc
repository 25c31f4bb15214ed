// Preference pairs as data: TRL's standard and conversational rows, rendered
// exactly as SFT renders the same prompt and reply (byte + plain: <s> prompt
// reply </s>, reply and </s> the targets), earlier assistant turns left as
// context, bad rows and over-long pairs left out as one, the prepared dataset
// of pairs (sample 2i chosen, 2i+1 rejected) and its reuse rule, and the
// pair batcher that keeps both replies of a pair in every slice.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shard/data/byte_tokenizer.h"
#include "shard/data/chat_format.h"
#include "shard/data/pair_batcher.h"
#include "shard/data/prepare_sft.h"
#include "shard/data/preference_jsonl.h"
#include "shard/data/sft_jsonl.h"
#include "tests/unit/data/data_test_util.h"

namespace shard {
namespace {

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

ChatFormat Plain() {
  auto f = ResolveChatFormat("plain", "byte");
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return *f;
}

// What the byte tokenizer and plain template must produce: <s> prompt reply </s>.
std::vector<int32_t> BytesOf(const std::string& prompt, const std::string& reply) {
  std::vector<int32_t> t{ByteTokenizer::kBos};
  for (unsigned char c : prompt + reply) t.push_back(c);
  t.push_back(ByteTokenizer::kEos);
  return t;
}

TEST(PreferenceRows, DetectedByAutoBeforePromptResponse) {
  auto f = DetectSftFormat(R"({"prompt":"p","chosen":"a","rejected":"b"})");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, SftFormat::kPreference);
  EXPECT_EQ(*DetectSftFormat(R"({"prompt":"p","response":"r"})"), SftFormat::kPromptResponse);
  // An SFT job reading a pair says so.
  auto sft = ParseSftRow(R"({"prompt":"p","chosen":"a","rejected":"b"})");
  ASSERT_FALSE(sft.ok());
  EXPECT_NE(sft.status().message().find("preference:"), std::string::npos) << sft.status().ToString();
}

TEST(PreferenceRows, StandardAndConversational) {
  auto s = ParsePreferenceRow(R"({"prompt":"2+2=","chosen":"4","rejected":"5","system":"be exact","id":3})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->prompt.size(), 2u);
  EXPECT_EQ(s->prompt[0].role, Role::kSystem);
  EXPECT_EQ(s->prompt[1].role, Role::kUser);
  EXPECT_EQ(s->prompt[1].content, "2+2=");
  EXPECT_EQ(s->chosen.role, Role::kAssistant);
  EXPECT_EQ(s->chosen.content, "4");
  EXPECT_EQ(s->rejected.content, "5");
  auto c = ParsePreferenceRow(
      R"({"prompt":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},)"
      R"({"role":"user","content":"2+2?"}],"chosen":[{"role":"assistant","content":"4"}],)"
      R"("rejected":[{"role":"assistant","content":"22"}]})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->prompt.size(), 3u);
  EXPECT_EQ(c->chosen.content, "4");
  EXPECT_EQ(c->rejected.content, "22");
}

TEST(PreferenceRows, BadRowsSayWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt":"p","chosen":"a"})", "needs \"rejected\""},
      {R"({"chosen":"a","rejected":"b"})", "implicit prompt"},
      {R"({"prompt":7,"chosen":"a","rejected":"b"})", "\"prompt\" must be a string or a list"},
      {R"({"prompt":"p","chosen":["a"],"rejected":"b"})", "\"chosen\" must be a string"},
      {R"({"prompt":[{"role":"user","content":"p"}],"chosen":"a","rejected":"b"})", "\"chosen\" must be an array"},
      {R"({"prompt":[{"role":"user","content":"p"}],"chosen":[{"role":"user","content":"a"}],"rejected":[]})",
       "\"chosen\" must hold one assistant message"},
      {R"({"prompt":[{"role":"user","content":"p"}],"chosen":[{"role":"assistant","content":"a"}],"rejected":[]})",
       "\"rejected\" is empty"},
      {R"({"prompt":[{"role":"user","content":"p"},{"role":"assistant","content":"x"}],)"
       R"("chosen":[{"role":"assistant","content":"a"}],"rejected":[{"role":"assistant","content":"b"}]})",
       "ends with an assistant message"},
      {R"({"prompt":[{"role":"user"}],"chosen":[],"rejected":[]})", "prompt[0] has no string \"content\""},
      {R"({"prompt": [)", "not valid JSON"},
  };
  for (const auto& [row, want] : cases) {
    auto r = ParsePreferenceRow(row);
    ASSERT_FALSE(r.ok()) << row;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << row << " -> " << r.status().ToString();
  }
}

// An empty reply is refused with its line (a pair needs two replies); a pair
// whose replies are the same trains nothing: counted, reported once, kept.
TEST(PreferencePrepare, EmptyRepliesAreRefusedAndSameRepliesCounted) {
  for (const char* row : {R"({"prompt":"p","chosen":"","rejected":"b"})", R"({"prompt":"p","chosen":"a","rejected":" "})",
                          R"({"prompt":[{"role":"user","content":"p"}],"chosen":[{"role":"assistant","content":""}],)"
                          R"("rejected":[{"role":"assistant","content":"b"}]})"}) {
    auto r = ParsePreferenceRow(row);
    ASSERT_FALSE(r.ok()) << row;
    EXPECT_NE(r.status().message().find("reply is empty"), std::string::npos) << r.status().ToString();
  }
  const std::string dir = testing_data::TempDir("pairs_empty");
  const std::string in = dir + "/pairs.jsonl";
  WriteText(in, R"({"prompt":"a","chosen":"b","rejected":"c"})" "\n"
                R"({"prompt":"a","chosen":"same","rejected":"same"})" "\n"
                R"({"prompt":"d","chosen":"x","rejected":"x"})" "\n"
                R"({"prompt":"e","chosen":"","rejected":"y"})" "\n");
  PrepareSftOptions o;
  o.input = in;
  o.tokenizer = "byte";
  o.chat_template = "plain";
  o.seq_len = 32;
  o.out = dir + "/prep";
  auto bad = PrepareSftData(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(in + ":4: \"chosen\": the reply is empty"), std::string::npos)
      << bad.status().ToString();
  o.bad_rows = BadRows::kSkip;
  auto r = PrepareSftData(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->header.identical_pairs, 2);
  EXPECT_EQ(r->header.num_samples, 6);  // kept: they are valid, only useless
  EXPECT_EQ(r->identical_pairs_first_line, 2);
}

// Byte tokenizer + plain: <s> prompt reply </s>, reply and </s> the targets,
// token for token what an SFT prompt/response row of the same texts gives.
TEST(PreferenceRender, AsSftRendersPromptAndReply) {
  ByteTokenizer tok;
  const ChatFormat plain = Plain();
  auto row = ParsePreferenceRow(R"({"prompt":"Q: 2+2? A: ","chosen":"4","rejected":"five"})");
  ASSERT_TRUE(row.ok());
  TokenizedPair pair;
  ASSERT_TRUE(RenderPreferencePair(*row, plain, tok, &pair).ok());
  EXPECT_EQ(pair.chosen.tokens, BytesOf("Q: 2+2? A: ", "4"));
  EXPECT_EQ(pair.rejected.tokens, BytesOf("Q: 2+2? A: ", "five"));
  // Targets: the reply's bytes and </s>.
  const size_t prompt_end = 1 + std::string("Q: 2+2? A: ").size();
  for (size_t i = 0; i < pair.rejected.mask.size(); ++i)
    EXPECT_EQ(pair.rejected.mask[i], i >= prompt_end ? 1 : 0) << i;
  EXPECT_EQ(pair.chosen.targets(), 2);
  EXPECT_EQ(pair.rejected.targets(), 5);
  for (const auto& [side, reply] : {std::pair{&pair.chosen, "4"}, std::pair{&pair.rejected, "five"}}) {
    auto msgs = ParseSftRow(std::string(R"({"prompt":"Q: 2+2? A: ","response":")") + reply + "\"}");
    ASSERT_TRUE(msgs.ok());
    TokenizedSample sft;
    ASSERT_TRUE(plain.Apply(*msgs, tok, TrainOn::kAssistant, &sft).ok());
    EXPECT_EQ(side->tokens, sft.tokens);
    EXPECT_EQ(side->mask, sft.mask);
  }
}

// A conversational prompt's earlier assistant turn is context: only the
// final reply (and its end-of-turn token) is scored.
TEST(PreferenceRender, OnlyTheFinalReplyIsATarget) {
  ByteTokenizer tok;
  auto row = ParsePreferenceRow(
      R"({"prompt":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},)"
      R"({"role":"user","content":"bye"}],"chosen":[{"role":"assistant","content":"ciao"}],)"
      R"("rejected":[{"role":"assistant","content":"no"}]})");
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  for (const char* tpl : {"plain", "chatml", "llama3"}) {
    auto format = ResolveChatFormat(tpl, "byte");
    ASSERT_TRUE(format.ok()) << format.status().ToString();
    TokenizedPair pair;
    Status st = RenderPreferencePair(*row, *format, tok, &pair);
    if (!st.ok()) continue;  // a template the byte tokenizer lacks specials for
    // The SFT rendering of the whole conversation trains "hello" too; the pair does not.
    std::vector<Message> whole = row->prompt;
    whole.push_back(row->chosen);
    TokenizedSample sft;
    ASSERT_TRUE(format->Apply(whole, tok, TrainOn::kAssistant, &sft).ok());
    EXPECT_EQ(pair.chosen.tokens, sft.tokens) << tpl;
    EXPECT_LT(pair.chosen.targets(), sft.targets()) << tpl;
    // The pair's targets are the last run of the SFT mask.
    size_t first = 0;
    for (size_t i = 0; i < pair.chosen.mask.size(); ++i)
      if (pair.chosen.mask[i]) {
        first = i;
        break;
      }
    for (size_t i = first; i < sft.mask.size(); ++i) EXPECT_EQ(pair.chosen.mask[i], sft.mask[i]) << tpl << " " << i;
    EXPECT_GE(pair.chosen.targets(), 5) << tpl;  // "ciao" + end of turn
  }
}

TEST(PreferenceRender, OverlongPairsAreFittedAsOne) {
  ByteTokenizer tok;
  const ChatFormat plain = Plain();
  auto row = ParsePreferenceRow(R"({"prompt":"abcd","chosen":"xy","rejected":"0123456789"})");
  ASSERT_TRUE(row.ok());
  TokenizedPair pair;
  ASSERT_TRUE(RenderPreferencePair(*row, plain, tok, &pair).ok());
  // chosen: 1 + 4 + 2 + 1 = 8 tokens, rejected: 1 + 4 + 10 + 1 = 16.
  TokenizedPair t = pair;
  ASSERT_TRUE(FitPair(&t, 9, Overlong::kTruncate));
  EXPECT_EQ(t.chosen.tokens, pair.chosen.tokens);  // fits: untouched
  EXPECT_EQ(t.rejected.tokens.size(), 10u);
  EXPECT_EQ(t.rejected.targets(), 5);  // the prompt's 5 tokens, then 5 of the reply
  TokenizedPair d = pair;
  EXPECT_FALSE(FitPair(&d, 9, Overlong::kDrop));  // one reply too long: the pair goes
  TokenizedPair all = pair;
  EXPECT_TRUE(FitPair(&all, 15, Overlong::kDrop));
  // Cut before any reply token: no target left, the pair goes even under truncate.
  TokenizedPair none = pair;
  EXPECT_FALSE(FitPair(&none, 4, Overlong::kTruncate));
}

TEST(PreferencePrepare, PairsAreSamplesTwoAtATimeAndLeftOutAsOne) {
  const std::string dir = testing_data::TempDir("pairs");
  const std::string in = dir + "/pairs.jsonl";
  WriteText(in,
            R"({"prompt":"a","chosen":"b","rejected":"c"})" "\n"
            R"({"prompt":"d","chosen":"e"})" "\n"  // bad: no rejected
            "\n"
            R"({"prompt":"f","chosen":"gg","rejected":"hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh"})" "\n"  // over-long
            R"({"prompt":[{"role":"user","content":"i"}],"chosen":[{"role":"assistant","content":"j"}],)"
            R"("rejected":[{"role":"assistant","content":"k"}]})" "\n");
  PrepareSftOptions o;
  o.input = in;
  o.tokenizer = "byte";
  o.chat_template = "plain";
  o.seq_len = 16;
  o.out = dir + "/prep";
  o.threads = 2;
  // bad_rows fail: the row's line is named.
  auto fail = PrepareSftData(o);
  ASSERT_FALSE(fail.ok());
  EXPECT_NE(fail.status().message().find(in + ":2:"), std::string::npos) << fail.status().ToString();
  o.bad_rows = BadRows::kSkip;
  o.overlong = Overlong::kDrop;
  auto r = PrepareSftData(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const PreparedHeader& h = r->header;
  EXPECT_TRUE(h.pairs);
  EXPECT_EQ(h.overlong, "drop");
  EXPECT_EQ(h.rows_read, 4);
  EXPECT_EQ(h.bad_rows_skipped, 1);
  EXPECT_EQ(h.overlong_pairs_dropped, 1);
  EXPECT_EQ(h.longer_than_seq_len, 1);
  EXPECT_EQ(h.num_pairs(), 2);
  auto ds = PreparedDataset::Open(o.out);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_TRUE(ds->header().pairs);
  ASSERT_EQ(ds->num_samples(), 4);
  auto text = [&](int64_t s) {
    std::string t;
    const SampleView v = ds->sample(s);
    for (int64_t i = 0; i < v.length; ++i)
      if (v.tokens[i] < 256) t += static_cast<char>(v.tokens[i]);
    return t;
  };
  EXPECT_EQ(text(0), "ab");
  EXPECT_EQ(text(1), "ac");
  EXPECT_EQ(text(2), "ij");
  EXPECT_EQ(text(3), "ik");
  // Reused while unchanged; another overlong or an SFT format is another dataset.
  ByteTokenizer tok;
  EXPECT_TRUE(*PreparedIsCurrent(o, tok));
  PrepareSftOptions t = o;
  t.overlong = Overlong::kTruncate;
  EXPECT_FALSE(*PreparedIsCurrent(t, tok));
  PrepareSftOptions m = o;
  m.format = SftFormat::kMessages;
  EXPECT_FALSE(*PreparedIsCurrent(m, tok));
  // Truncate keeps the over-long pair, cut to seq_len + 1 tokens.
  auto tr = PrepareSftData(t);
  ASSERT_TRUE(tr.ok()) << tr.status().ToString();
  EXPECT_EQ(tr->header.num_pairs(), 3);
  EXPECT_EQ(tr->header.overlong_pairs_dropped, 0);
  std::filesystem::remove_all(dir);
}

TEST(PairBatcher, BothRepliesOfAPairShareEverySlice) {
  const std::string dir = testing_data::TempDir("pair_batcher");
  std::string rows;
  for (int i = 0; i < 7; ++i)
    rows += R"({"prompt":"p)" + std::to_string(i) + R"(","chosen":"c)" + std::to_string(i) + R"(","rejected":"rr)" +
            std::to_string(i) + "\"}\n";
  WriteText(dir + "/p.jsonl", rows);
  PrepareSftOptions o;
  o.input = dir + "/p.jsonl";
  o.chat_template = "plain";
  o.seq_len = 12;
  o.out = dir + "/prep";
  ASSERT_TRUE(PrepareSftData(o).ok());
  auto ds = PreparedDataset::Open(o.out);
  ASSERT_TRUE(ds.ok());
  Sampler sampler(ds->header().num_pairs(), /*shuffle=*/true, 7);
  auto b = PairBatcher::Create(&*ds, &sampler, {.global_batch = 4, .seq_len = 12});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const PairPlan plan = b->PlanGlobalBatch(5);  // crosses into the second epoch
  EXPECT_EQ(plan.consumed, 4);
  ASSERT_EQ(plan.pairs.size(), 4u);
  const int64_t T = 12;
  // Rank 1 of 2 takes pairs [2, 4): rows chosen, rejected, chosen, rejected.
  const BatchSlice s = b->RankPairs(1, 2);
  ASSERT_EQ(s.end - s.begin, 2);
  std::vector<int32_t> tok(4 * T), tgt(4 * T), pos(4 * T), seg(4 * T);
  b->FillPairs(plan, s.begin, 2, tok.data(), tgt.data(), pos.data(), seg.data());
  int64_t targets = 0;
  for (int k = 0; k < 2; ++k) {
    const int64_t p = plan.pairs[s.begin + k];
    const std::string n = std::to_string(p);
    for (int side = 0; side < 2; ++side) {
      const int32_t* row = tok.data() + (2 * k + side) * T;
      std::string text;
      for (int64_t i = 1; i < T && row[i] < 256 && row[i] != 0; ++i) text += static_cast<char>(row[i]);
      EXPECT_EQ(text, "p" + n + (side == 0 ? "c" : "rr") + n) << "pair " << p << " side " << side;
      for (int64_t i = 0; i < T; ++i) targets += tgt[(2 * k + side) * T + i] >= 0;
    }
  }
  // Per pair: chosen "cN" + </s> = 3 targets, rejected "rrN" + </s> = 4.
  EXPECT_EQ(targets, 2 * (3 + 4));
  EXPECT_EQ(plan.target_tokens, 4 * (3 + 4));
  // A slice past the batch is padding only.
  b->FillPairs(plan, 4, 1, tok.data(), tgt.data(), pos.data(), seg.data());
  EXPECT_TRUE(std::all_of(tgt.begin(), tgt.begin() + 2 * T, [](int32_t t) { return t < 0; }));
  // An SFT dataset is refused.
  WriteText(dir + "/s.jsonl", R"({"prompt":"p","response":"r"})" "\n");
  PrepareSftOptions so = o;
  so.input = dir + "/s.jsonl";
  so.out = dir + "/sft";
  ASSERT_TRUE(PrepareSftData(so).ok());
  auto sft = PreparedDataset::Open(so.out);
  Sampler s1(1, false, 1);
  auto refused = PairBatcher::Create(&*sft, &s1, {.global_batch = 1, .seq_len = 12});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not preference pairs"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shard
