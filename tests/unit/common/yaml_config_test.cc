#include "shard/common/yaml_config.h"

#include <gtest/gtest.h>

#include <fstream>

namespace shard {
namespace {

struct Cfg {
  int steps = 1;
  double lr = 0.1;
  std::string name = "x";
  bool flag = false;
  std::vector<double> betas{0.9, 0.99};
  std::string mode = "a";
};

Status Map(YamlMap& root, Cfg* c) {
  RETURN_IF_ERROR(root.Get("name", &c->name));
  ASSIGN_OR_RETURN(YamlMap t, root.Sub("train"));
  RETURN_IF_ERROR(t.Get("steps", &c->steps));
  RETURN_IF_ERROR(t.Get("lr", &c->lr));
  RETURN_IF_ERROR(t.Get("flag", &c->flag));
  RETURN_IF_ERROR(t.Get("betas", &c->betas));
  RETURN_IF_ERROR(t.GetEnum("mode", {"a", "b"}, &c->mode));
  RETURN_IF_ERROR(t.Finish());
  return root.Finish();
}

StatusOr<Cfg> Parse(const std::string& text, const std::vector<std::string>& sets = {}) {
  ASSIGN_OR_RETURN(YamlMap root, YamlMap::LoadString(text, "job.yaml"));
  for (const auto& s : sets) RETURN_IF_ERROR(ApplyOverride(root.node(), s));
  Cfg c;
  RETURN_IF_ERROR(Map(root, &c));
  return c;
}

TEST(YamlConfigTest, ReadsValuesAndKeepsDefaults) {
  auto c = Parse("name: demo\ntrain: {steps: 7, betas: [0.8, 0.95]}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "demo");
  EXPECT_EQ(c->steps, 7);
  EXPECT_DOUBLE_EQ(c->lr, 0.1);
  EXPECT_EQ(c->betas, (std::vector<double>{0.8, 0.95}));
}

TEST(YamlConfigTest, UnknownKeyNamesFileAndDottedKey) {
  auto c = Parse("train: {stepz: 7}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("job.yaml: train.stepz: unknown key"), std::string::npos)
      << c.status().message();
  auto top = Parse("trian: {}\n");
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.status().message().find("job.yaml: trian: unknown key"), std::string::npos);
}

// The known keys an unknown one is listed against include the keys a reader
// only asked about (Has), never an empty list.
TEST(YamlConfigTest, UnknownKeyListsWhatTheReaderKnows) {
  auto root = YamlMap::LoadString("optim: {lr: 0.1}\n", "job.yaml");
  ASSERT_TRUE(root.ok());
  auto m = root->Sub("optim");
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->Has("state_dtype"));
  Status st = m->Finish();
  EXPECT_NE(st.message().find("job.yaml: optim.lr: unknown key (known here: state_dtype)"), std::string::npos)
      << st.ToString();
  auto bare = YamlMap::LoadString("x: 1\n", "job.yaml");
  ASSERT_TRUE(bare.ok());
  EXPECT_NE(bare->Finish().message().find("x: unknown key (no key is read here)"), std::string::npos)
      << bare->Finish().ToString();
}

TEST(YamlConfigTest, WrongTypesAreErrors) {
  auto c = Parse("train: {steps: abc}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train.steps: expected an integer, got 'abc'"), std::string::npos)
      << c.status().message();
  EXPECT_FALSE(Parse("train: {steps: 1.5}\n").ok());
  EXPECT_FALSE(Parse("train: {flag: maybe}\n").ok());
  EXPECT_FALSE(Parse("train: {betas: 3}\n").ok());
  EXPECT_FALSE(Parse("train: 5\n").ok());
  EXPECT_FALSE(Parse("train: {steps: [1, 2]}\n").ok());
  auto e = Parse("train: {mode: c}\n");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("'c' is not one of: a, b"), std::string::npos);
}

TEST(YamlConfigTest, MalformedYamlNamesLine) {
  auto c = Parse("name: x\ntrain: {steps: 1\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("job.yaml: not valid YAML"), std::string::npos);
  EXPECT_FALSE(Parse("- a\n- b\n").ok());
}

TEST(YamlConfigTest, OverridesApplyAndCreateMaps) {
  auto c = Parse("train: {steps: 7}\n", {"train.steps=9", "train.lr=1e-3", "name=other", "train.betas=[0.5, 0.6]"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->steps, 9);
  EXPECT_DOUBLE_EQ(c->lr, 1e-3);
  EXPECT_EQ(c->name, "other");
  EXPECT_EQ(c->betas, (std::vector<double>{0.5, 0.6}));
  auto fresh = Parse("name: x\n", {"train.steps=3"});
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->steps, 3);
  // An override with a typo is still caught by the strict mapping.
  EXPECT_FALSE(Parse("name: x\n", {"train.stepz=3"}).ok());
  EXPECT_FALSE(Parse("name: x\n", {"nokeyvalue"}).ok());
  EXPECT_FALSE(Parse("name: x\n", {"name.sub=1"}).ok());
}

// yaml-cpp keeps a repeated key and `node[key]` returns the first, so a second
// block used to be ignored without a word.
TEST(YamlConfigTest, DuplicateKeysAreRefusedWithBothLines) {
  auto block = Parse("name: a\ntrain: {steps: 1}\nname: b\n");
  ASSERT_FALSE(block.ok());
  EXPECT_EQ(block.status().message(), "job.yaml: name: duplicate key (line 1 and line 3); keep one");
  auto nested = Parse("train:\n  steps: 1\n  lr: 0.1\n  steps: 2\n");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("job.yaml: train.steps: duplicate key (line 2 and line 4)"),
            std::string::npos)
      << nested.status().message();
  auto sections = Parse("train: {steps: 1}\nname: x\ntrain: {lr: 0.5}\n");
  ASSERT_FALSE(sections.ok());
  EXPECT_NE(sections.status().message().find("train: duplicate key (line 1 and line 3)"), std::string::npos);
  // Inside a list item too, and in an override's value.
  EXPECT_FALSE(Parse("train: {betas: [{a: 1, a: 2}]}\n").ok());
  auto set = Parse("", {"train={steps: 1, steps: 2}"});
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("steps: duplicate key"), std::string::npos) << set.status().message();
}

TEST(YamlConfigTest, KeysMustBeSingleValues) {
  auto c = Parse("train:\n  ? [a, b]\n  : 1\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("a key must be a single value"), std::string::npos) << c.status().message();
}

// 100,000 levels used to come back as yaml-cpp's "bad file".
TEST(YamlConfigTest, DeepNestingIsNamed) {
  auto deep = Parse("name: " + std::string(100000, '[') + std::string(100000, ']') + "\n");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("job.yaml: not valid YAML: nested too deeply"), std::string::npos)
      << deep.status().message();
  EXPECT_EQ(deep.status().message().find("bad file"), std::string::npos);
  // Past shardd's own limit (64) but within yaml-cpp's: the key path is named.
  auto deeper = Parse("train: {betas: " + std::string(100, '[') + std::string(100, ']') + "}\n");
  ASSERT_FALSE(deeper.ok());
  EXPECT_NE(deeper.status().message().find("job.yaml: train.betas"), std::string::npos) << deeper.status().message();
  EXPECT_NE(deeper.status().message().find("nested deeper than 64 levels"), std::string::npos);
}

// An empty value used to parse as null, which reads as "absent": the default
// came back. It is the empty string: a number refuses it, a text key is cleared.
TEST(YamlConfigTest, EmptyOverrideValueIsAnEmptyString) {
  for (const char* set : {"train.steps=", "train.steps=  "}) {
    auto c = Parse("train: {steps: 7}\n", {set});
    ASSERT_FALSE(c.ok()) << set;
    EXPECT_NE(c.status().message().find("job.yaml: train.steps: expected an integer, got ''"), std::string::npos)
        << c.status().message();
  }
  auto cleared = Parse("name: demo\n", {"name="});
  ASSERT_TRUE(cleared.ok()) << cleared.status().ToString();
  EXPECT_EQ(cleared->name, "");
}

TEST(YamlConfigTest, LoadFileReportsDuplicatesWithThePath) {
  const std::string path = ::testing::TempDir() + "/dup_job.yaml";
  {
    std::ofstream f(path);
    f << "train:\n  steps: 3\ntrain:\n  steps: 4\n";
  }
  auto m = YamlMap::LoadFile(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), path + ": train: duplicate key (line 1 and line 3); keep one");
}

// "Billion laughs": 9 levels of 10 aliases each, 10^9 values to any walk of
// the tree from a file of a few hundred bytes (yaml-cpp shares an anchored node
// between its aliases; walking them used to take a minute of CPU in `plan` and
// in the coordinator at submit). `levels` lines after the first; the same text
// is in tests/fuzz/corpus/fuzz_job_file/regress-alias-bomb.yaml.
std::string AliasBomb(int levels, const std::string& prefix = "") {
  std::string text = prefix + "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int l = 1; l <= levels; ++l) {
    const std::string prev = "*l" + std::to_string(l - 1);
    text += "l" + std::to_string(l) + ": &l" + std::to_string(l) + " [";
    for (int i = 0; i < 10; ++i) text += (i ? ", " : "") + prev;
    text += "]\n";
  }
  return text;
}

TEST(YamlConfigTest, NestedAliasesHaveANodeBudget) {
  const std::string path = ::testing::TempDir() + "/alias_bomb.yaml";
  {
    std::ofstream f(path);
    f << AliasBomb(8, "name: bomb\n");
  }
  auto m = YamlMap::LoadFile(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message().rfind(path + ": more than 1000000 values once its aliases (*name) are expanded", 0),
            0u)
      << m.status().message();
  EXPECT_EQ(m.status().message().find('\n'), std::string::npos) << "one line";
  // The same through --set, whose value is a document of its own.
  std::string flow = "{";
  for (int l = 0; l <= 8; ++l) {
    flow += std::string(l ? ", " : "") + "l" + std::to_string(l) + ": &l" + std::to_string(l) + " [";
    for (int i = 0; i < 10; ++i) flow += (i ? ", " : "") + (l ? "*l" + std::to_string(l - 1) : std::string("lol"));
    flow += "]";
  }
  flow += "}";
  auto set = Parse("name: x\n", {"train.mode=" + flow});
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("more than 1000000 values"), std::string::npos) << set.status().message();
}

TEST(YamlConfigTest, AliasesWithinTheBudgetStillWork) {
  // 10^5 values: within the budget.
  auto small = YamlMap::LoadString(AliasBomb(4), "small.yaml");
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  auto c = Parse("defaults: &d {steps: 7, mode: b}\ntrain: *d\n");
  ASSERT_FALSE(c.ok());  // `defaults` is no key of Cfg; the alias itself was read
  EXPECT_NE(c.status().message().find("job.yaml: defaults: unknown key"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace shard
