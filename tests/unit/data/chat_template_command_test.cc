// shardctl chat-template: the printed text is the reference rendering (the
// goldens of @huggingface/jinja), extra variables pass through, and bad input is
// one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "coordinator/ctl/chat_template_command.h"
#include "tests/unit/data/data_test_util.h"

namespace shardctl {
namespace {

using ojson = nlohmann::ordered_json;

std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return path;
}

TEST(ChatTemplateCommand, PrintsWhatTheReferenceRenders) {
  const ojson g = ojson::parse(std::ifstream(shard::testing_data::SourceDir() +
                                             "/tests/testdata/chat_templates/goldens.json"));
  const std::string d = shard::testing_data::TempDir("ctl_chat_template");
  int checked = 0;
  for (const auto& [name, tpl] : g["templates"].items()) {
    // A tokenizer folder with only tokenizer_config.json: the template and special tokens.
    const std::string folder = d + "/" + name;
    std::filesystem::create_directories(folder);
    ojson cfg = tpl["special_tokens"];
    cfg["chat_template"] = tpl["source"];
    WriteFile(folder + "/tokenizer_config.json", cfg.dump());
    for (const ojson& c : g["cases"]) {
      if (c["template"] != name || c.contains("extra") || c.contains("error")) continue;
      ChatTemplateOptions o;
      o.tokenizer = folder;
      o.messages = WriteFile(d + "/m.json", g["conversations"][c["conversation"].get<std::string>()].dump());
      o.add_generation_prompt = c["add_generation_prompt"];
      auto text = RenderChatTemplateText(o);
      ASSERT_TRUE(text.ok()) << name << ": " << text.status().ToString();
      EXPECT_EQ(*text, c["text"].get<std::string>()) << name << " " << c["conversation"];
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

TEST(ChatTemplateCommand, ExtraVariablesAndErrors) {
  const std::string d = shard::testing_data::TempDir("ctl_chat_template_extra");
  WriteFile(d + "/tokenizer_config.json",
            ojson{{"chat_template", "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}"
                                    "{% endfor %}{% if add_generation_prompt %}>{% endif %}"}}
                .dump());
  ChatTemplateOptions o;
  o.tokenizer = d;
  o.messages = WriteFile(d + "/m.json", R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"n": 1}]})");
  o.add_generation_prompt = true;
  EXPECT_EQ(*RenderChatTemplateText(o), "[{\"n\": 1}]hi>");

  o.messages = WriteFile(d + "/bad.json", "{\"msgs\": []}");
  EXPECT_NE(RenderChatTemplateText(o).status().message().find("an object with a \"messages\" array"), std::string::npos);
  o.messages = WriteFile(d + "/m2.json", R"([{"role": "user", "content": "hi"}])");
  o.chat_template = "plain";
  auto named = RenderChatTemplateText(o);
  EXPECT_NE(named.status().message().find("--add-generation-prompt needs the model's own chat template"), std::string::npos);
  o.add_generation_prompt = false;
  o.tokenizer = "byte";
  EXPECT_EQ(*RenderChatTemplateText(o), "<s>hi");  // plain: BOS, then the text
  o.chat_template = "hf";
  EXPECT_NE(RenderChatTemplateText(o).status().message().find("needs a tokenizer folder"), std::string::npos);

  // Issue 28 item 3: a 200,000-deep --messages file crashed copying it (SIGSEGV).
  o.tokenizer = d;
  o.chat_template = "auto";
  for (const std::string& deep : {"{\"messages\": " + std::string(200000, '[') + std::string(200000, ']') + "}",
                                  std::string(200000, '[') + std::string(200000, ']')}) {
    o.messages = WriteFile(d + "/deep.json", deep);
    auto r = RenderChatTemplateText(o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), "--messages " + d + "/deep.json: JSON nested deeper than 512 levels");
  }
  // Within the file bound, the template's own depth bound says no.
  o.messages = WriteFile(d + "/deep.json", "[" + std::string(400, '[') + std::string(400, ']') + "]");
  auto r = RenderChatTemplateText(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("context variable 'messages': nesting deeper than"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace shardctl
