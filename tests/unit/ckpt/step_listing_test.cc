// What a checkpoint listing says of a step (shard/ckpt/step_listing.h): the
// step its manifest holds, not the folder's name, and "valid" only when
// export would take it — the step proof and a model config that reads (not 0
// layers, not 1.7e15 parameters, units as the config makes them).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "shard/ckpt/step_listing.h"
#include "shard/spec/param_layout.h"
#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard {
namespace {

using namespace ckpt_testing;

LlamaConfig TinyConfig() {
  LlamaConfig c;
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

// A manifest whose units, hash and model_config are those of `c`.
Manifest ModelManifest(int64_t step, const LlamaConfig& c) {
  Manifest m = BaseManifest(step, 2);
  m.model_config = c.ToHfConfigJson();
  m.model_hash = c.ShapeHash();
  m.units.clear();
  for (const UnitSpec& u : ParamLayout::ForLlama(c).units) m.units.emplace_back(u.name, u.numel);
  return m;
}

// The manifest's model_config with `key` set to `value`, everything else kept.
Manifest WithConfigKey(Manifest m, const std::string& key, int64_t value) {
  nlohmann::json j = nlohmann::json::parse(m.model_config);
  j[key] = value;
  m.model_config = j.dump();
  return m;
}

StepListing Describe(const std::string& job_dir, int64_t folder_step) {
  auto steps = ListSteps(job_dir);
  EXPECT_TRUE(steps.ok()) << steps.status().ToString();
  for (const StepInfo& s : *steps)
    if (s.step == folder_step) return DescribeStep(s, /*verify_checksums=*/true);
  ADD_FAILURE() << "no step folder " << folder_step << " in " << job_dir;
  return {};
}

class StepListingTest : public ProtocolTest {};

TEST_F(StepListingTest, AStepOfARealModelIsValid) {
  MakeCommittedStepOf(Path("job"), ModelManifest(10, TinyConfig()));
  StepListing l = Describe(Path("job"), 10);
  EXPECT_TRUE(l.valid) << l.problem;
  EXPECT_EQ(l.problem, "");
  EXPECT_EQ(l.step, 10);
  EXPECT_EQ(l.world, 2);
  EXPECT_EQ(l.files, 2);
  EXPECT_GT(l.manifest_bytes, 0);
  auto config = StepModelConfig(ModelManifest(10, TinyConfig()), "x");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->NumParams(), TinyConfig().NumParams());
}

// Both pass the step proof (the shard files agree with their manifest); only
// the model config says export would refuse them.
TEST_F(StepListingTest, AModelConfigExportRefusesIsInvalid) {
  const Manifest good = ModelManifest(10, TinyConfig());
  MakeCommittedStepOf(Path("zero"), WithConfigKey(good, "num_hidden_layers", 0));
  // 4096 layers of d 131072, ffn 1 << 20: about 1.7e15 parameters.
  Manifest huge = WithConfigKey(WithConfigKey(WithConfigKey(good, "num_hidden_layers", 4096), "hidden_size", 131072),
                                "intermediate_size", int64_t{1} << 20);
  MakeCommittedStepOf(Path("huge"), huge);
  for (const std::string job : {"zero", "huge"}) {
    ASSERT_TRUE(CheckpointReader::Open(Path(job) + "/" + StepDirName(10), true).ok()) << job;
    StepListing l = Describe(Path(job), 10);
    EXPECT_FALSE(l.valid) << job;
    EXPECT_TRUE(l.committed);
    EXPECT_NE(l.problem.find("COMMITTED model_config"), std::string::npos) << job << ": " << l.problem;
  }
  EXPECT_NE(Describe(Path("zero"), 10).problem.find("num_hidden_layers must be > 0"), std::string::npos);
  EXPECT_NE(Describe(Path("huge"), 10).problem.find("parameters"), std::string::npos)
      << Describe(Path("huge"), 10).problem;
}

TEST_F(StepListingTest, UnitsOrHashOtherThanTheConfigsAreInvalid) {
  Manifest m = ModelManifest(10, TinyConfig());
  m.units[1].second += 4;  // the shard files hold a bigger block than the config makes
  MakeCommittedStepOf(Path("units"), m);
  StepListing l = Describe(Path("units"), 10);
  EXPECT_FALSE(l.valid);
  EXPECT_NE(l.problem.find("unit 1 is layers.0"), std::string::npos) << l.problem;
  // The synthetic steps of the protocol tests carry no real model config.
  MakeCommittedStep(Path("synthetic"), 10, 1);
  EXPECT_FALSE(Describe(Path("synthetic"), 10).valid);
}

// A link step_30 to step 10 is listed as step 10 (its manifest's) and is
// invalid, naming the mismatch; a link out of the directory is not listed.
TEST_F(StepListingTest, AStepIsNamedByItsManifest) {
  const std::string job = Path("job");
  const std::string s10 = MakeCommittedStepOf(job, ModelManifest(10, TinyConfig()));
  fs::create_symlink(StepDirName(10), job + "/" + StepDirName(30));
  const std::string other = MakeCommittedStepOf(Path("other"), ModelManifest(20, TinyConfig()));
  fs::create_symlink(other, job + "/" + StepDirName(20));
  auto steps = ListSteps(job);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 2u) << "the link out of the directory is listed";
  StepListing l = Describe(job, 30);
  EXPECT_EQ(l.step, 10);
  EXPECT_EQ(l.folder_step, 30);
  EXPECT_FALSE(l.valid);
  EXPECT_NE(l.problem.find("named step 30 but its manifest (COMMITTED) is of step 10"), std::string::npos) << l.problem;
  EXPECT_TRUE(Describe(job, 10).valid);
  (void)s10;
}

}  // namespace
}  // namespace shard
