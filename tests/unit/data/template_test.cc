// Chat templates: golden renderings and ids on the byte tokenizer and on real
// tokenizers (ids equal the reference encoding of the rendered conversation, or
// Meta's own Llama-2 chat encoding for the SentencePiece model), and the loss
// mask: no prompt token is ever a target, every assistant token is.
#include <gtest/gtest.h>

#include <filesystem>

#include "shard/data/byte_tokenizer.h"
#include "shard/data/chat_template.h"
#include "tests/unit/data/data_test_util.h"

namespace shard {
namespace {

std::vector<Message> Conversation() {
  return {{Role::kSystem, "Be brief."}, {Role::kUser, "Hi?"}, {Role::kAssistant, "Hello!"},
          {Role::kUser, "2+2?"}, {Role::kAssistant, " 4 "}};
}

std::vector<Message> FromJson(const nlohmann::json& ms) {
  std::vector<Message> out;
  for (const auto& m : ms) out.push_back({*ParseRole(m["role"].get<std::string>()), m["content"].get<std::string>()});
  return out;
}

// What an assistant turn trains on, per template (content as the template writes it + its end marker).
std::string ExpectedTargets(ChatTemplate t, const std::vector<Message>& ms, bool dummy_prefix) {
  auto strip = [](std::string s) {
    s.erase(0, s.find_first_not_of(" \t\n\r\f\v"));
    s.erase(s.find_last_not_of(" \t\n\r\f\v") + 1);
    return s;
  };
  std::string out;
  for (const auto& m : ms) {
    if (m.role != Role::kAssistant) continue;
    switch (t) {
      case ChatTemplate::kPlain: out.append(m.content).append("</s>"); break;
      case ChatTemplate::kLlama3: out.append(strip(m.content)).append("<|eot_id|>"); break;
      case ChatTemplate::kChatml: out.append(m.content).append("<|im_end|>"); break;
      case ChatTemplate::kLlama2: out.append(" ").append(strip(m.content)).append(" </s>"); break;
    }
  }
  // A dummy-prefix decoder (SentencePiece style) drops the text's first space.
  if (dummy_prefix && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

struct Split {
  std::vector<int32_t> targets, prompt;
};
Split SplitByMask(const TokenizedSample& s) {
  Split r;
  for (size_t i = 0; i < s.tokens.size(); ++i) (s.mask[i] ? r.targets : r.prompt).push_back(s.tokens[i]);
  return r;
}

TEST(TemplateTest, ByteTokenizerGoldenRenderings) {
  ByteTokenizer tok;
  const auto ms = Conversation();
  const std::pair<ChatTemplate, std::string> cases[] = {
      {ChatTemplate::kPlain, "<s>Be brief.Hi?Hello!</s>2+2? 4 </s>"},
      {ChatTemplate::kLlama3,
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
       "<|start_header_id|>user<|end_header_id|>\n\nHi?<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
       "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"},
      {ChatTemplate::kChatml,
       "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
       "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
       "<|im_start|>assistant\n 4 <|im_end|>\n"},
      {ChatTemplate::kLlama2,
       "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi? [/INST] Hello! </s><s>[INST] 2+2? [/INST] 4 </s>"},
  };
  for (const auto& [t, want] : cases) {
    auto text = RenderChatTemplate(t, ms, tok);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, want) << ChatTemplateName(t);
    TokenizedSample s;
    ASSERT_TRUE(ApplyChatTemplate(t, ms, tok, TrainOn::kAssistant, &s).ok());
    EXPECT_EQ(tok.Decode(s.tokens), want) << ChatTemplateName(t);  // specials are single ids, bytes are bytes
    // The mask: targets decode to exactly the replies and their end markers; the rest is prompt.
    const Split sp = SplitByMask(s);
    EXPECT_EQ(tok.Decode(sp.targets), ExpectedTargets(t, ms, false)) << ChatTemplateName(t);
    EXPECT_EQ(s.targets(), static_cast<int64_t>(sp.targets.size())) << "the first token is never a target here";
    TokenizedSample all;
    ASSERT_TRUE(ApplyChatTemplate(t, ms, tok, TrainOn::kAll, &all).ok());
    EXPECT_EQ(all.tokens, s.tokens);
    EXPECT_EQ(all.targets(), static_cast<int64_t>(all.tokens.size()) - 1);
  }
}

TEST(TemplateTest, SpecialTokensAreSingleIds) {
  ByteTokenizer tok;
  TokenizedSample s;
  ASSERT_TRUE(ApplyChatTemplate(ChatTemplate::kLlama3, {{Role::kUser, "a"}, {Role::kAssistant, "b"}}, tok,
                                TrainOn::kAssistant, &s).ok());
  const std::vector<int32_t> want = {*tok.TokenId("<|begin_of_text|>"), *tok.TokenId("<|start_header_id|>"), 'u', 's', 'e',
                                     'r', *tok.TokenId("<|end_header_id|>"), '\n', '\n', 'a', *tok.TokenId("<|eot_id|>"),
                                     *tok.TokenId("<|start_header_id|>"), 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't',
                                     *tok.TokenId("<|end_header_id|>"), '\n', '\n', 'b', *tok.TokenId("<|eot_id|>")};
  EXPECT_EQ(s.tokens, want);
  std::vector<uint8_t> mask(want.size(), 0);
  mask[mask.size() - 2] = mask[mask.size() - 1] = 1;
  EXPECT_EQ(s.mask, mask);
  // A user message that spells a special token stays text for the byte tokenizer.
  ASSERT_TRUE(ApplyChatTemplate(ChatTemplate::kPlain, {{Role::kUser, "<|eot_id|>"}, {Role::kAssistant, "x"}}, tok,
                                TrainOn::kAssistant, &s).ok());
  EXPECT_EQ(s.tokens.size(), 1 + 10 + 1 + 1u);
}

TEST(TemplateTest, Errors) {
  ByteTokenizer tok;
  TokenizedSample s;
  auto st = ApplyChatTemplate(ChatTemplate::kLlama3, {{Role::kUser, "a"}}, tok, TrainOn::kAssistant, &s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no assistant message"), std::string::npos) << st.message();
  EXPECT_TRUE(ApplyChatTemplate(ChatTemplate::kLlama3, {{Role::kUser, "a"}}, tok, TrainOn::kAll, &s).ok());
  st = ApplyChatTemplate(ChatTemplate::kLlama2, {{Role::kUser, "a"}, {Role::kUser, "b"}, {Role::kAssistant, "c"}}, tok,
                         TrainOn::kAssistant, &s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("alternation"), std::string::npos) << st.message();
  st = ApplyChatTemplate(ChatTemplate::kPlain, {{Role::kUser, "a"}, {Role::kAssistant, ""}}, tok, TrainOn::kAssistant, &s);
  EXPECT_TRUE(st.ok()) << "the EOS after an empty reply is still a target";
  EXPECT_FALSE(ParseChatTemplate("vicuna").ok());
  EXPECT_FALSE(ParseTrainOn("prompt").ok());
  auto small = LoadTokenizer(testing_data::GoldenPath("sp_small.model"));
  ASSERT_TRUE(small.ok());
  st = CheckTemplateTokens(ChatTemplate::kLlama3, **small);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << "bad input: a job fails at once, not on every restart";
  EXPECT_NE(st.message().find("<|begin_of_text|>"), std::string::npos) << st.message();
  EXPECT_TRUE(CheckTemplateTokens(ChatTemplate::kLlama2, **small).ok());
}

// ---- Real tokenizers: ids against the goldens, masks by decoding -------------

struct RealCase {
  const char* name;
  const char* golden;
  std::string (*path)();
};
std::string Llama3() { return testing_data::NpmTokenizerJson("llama3"); }
std::string Qwen3() { return testing_data::NpmTokenizerJson("qwen3"); }
std::string Llama2Json() { return testing_data::NpmTokenizerJson("llama2"); }
std::string Llama2Model() { return testing_data::TokenizerDir() + "/llama2.model"; }

// Test names in ctest: the case name, not the struct's bytes.
void PrintTo(const RealCase& c, std::ostream* os) { *os << c.name; }

class RealTemplateTest : public ::testing::TestWithParam<RealCase> {};

TEST_P(RealTemplateTest, IdsMatchReferenceAndMaskCoversReplies) {
  const RealCase& c = GetParam();
  if (!std::filesystem::exists(c.path())) GTEST_SKIP() << c.path() << ": " << testing_data::kFetchHint;
  auto tok = LoadTokenizer(c.path());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const auto golden = testing_data::ReadJson(testing_data::GoldenPath(c.golden));
  ASSERT_FALSE(golden["templates"].empty());
  for (const auto& g : golden["templates"]) {
    auto tpl = ParseChatTemplate(g["template"].get<std::string>());
    ASSERT_TRUE(tpl.ok());
    const auto ms = FromJson(g["messages"]);
    if (g.contains("text")) {
      auto text = RenderChatTemplate(*tpl, ms, **tok);
      ASSERT_TRUE(text.ok());
      EXPECT_EQ(*text, g["text"].get<std::string>()) << c.name;
    }
    TokenizedSample s;
    auto st = ApplyChatTemplate(*tpl, ms, **tok, TrainOn::kAssistant, &s);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(s.tokens, g["ids"].get<std::vector<int32_t>>()) << c.name << " " << g["messages"].dump();
    if ((*tok)->kind() == "hf-bpe") {
      // Target tokens decode to exactly the replies + end markers: no token spans a prompt/reply boundary.
      const Split sp = SplitByMask(s);
      EXPECT_EQ((*tok)->Decode(sp.targets), ExpectedTargets(*tpl, ms, (*tok)->adds_dummy_prefix()))
          << c.name << " " << g["messages"].dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Real, RealTemplateTest,
                         ::testing::Values(RealCase{"llama3", "llama3.json", Llama3}, RealCase{"qwen3_chatml", "qwen3.json", Qwen3},
                                           RealCase{"llama2_json", "llama2.json", Llama2Json},
                                           RealCase{"llama2_sp_meta_format", "llama2_sp.json", Llama2Model}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace shard
