// ProveStepComplete, the one proof every checkpoint reader relies on (issue 18
// item 1): pure, on manifests and shard headers built in memory.
#include <gtest/gtest.h>

#include "shard/ckpt/step_proof.h"
#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard {
namespace {

using namespace ckpt_testing;

struct Step {
  Manifest m;
  std::vector<ShardHeader> h;
};

Step Complete(int n) {
  Step s;
  s.m = BaseManifest(10, n);
  for (int r = 0; r < n; ++r) {
    s.m.files.push_back({ShardFileName(r, n), r, 100, 0});
    s.h.push_back(HeaderFor(10, r, n));
  }
  return s;
}

std::string ProofError(const Step& s) {
  Status st = ProveStepComplete(s.m, s.h, "runs/job/step_00000010");
  return st.ok() ? "" : st.message();
}

TEST(StepProofTest, ACompleteStepPasses) {
  // 1 to 40 shards of units of 37, 101 and 10 elements: the last shards of
  // the small units hold nothing (FSDP padding) and that is still complete.
  for (int n : {1, 2, 3, 7, 16, 40}) {
    SCOPED_TRACE(n);
    EXPECT_EQ(ProofError(Complete(n)), "");
  }
}

TEST(StepProofTest, AFileListedTwiceFails) {
  Step s = Complete(2);
  s.m.files[1] = s.m.files[0];
  s.h[1] = s.h[0];
  const std::string e = ProofError(s);
  EXPECT_NE(e.find("names file rank_00000-of-00002.shard twice"), std::string::npos) << e;
  EXPECT_NE(e.find("runs/job/step_00000010"), std::string::npos) << e;
}

TEST(StepProofTest, AShardRankListedTwiceUnderAnotherNameFails) {
  Step s = Complete(3);
  s.m.files[2].shard_rank = 1;
  EXPECT_NE(ProofError(s).find("shard 1 is listed twice"), std::string::npos) << ProofError(s);
}

TEST(StepProofTest, AMisnamedFileFails) {
  Step s = Complete(2);
  s.m.files[1].name = "rank_00001-of-00003.shard";
  EXPECT_NE(ProofError(s).find("is not named as shard 1 of 2"), std::string::npos) << ProofError(s);
}

TEST(StepProofTest, AGapInAUnitFails) {
  Step s = Complete(2);
  s.h[1].units[1].begin += 1;  // element 51 of layers.0 is in no file
  s.h[1].units[1].count -= 1;
  const std::string e = ProofError(s);
  EXPECT_NE(e.find("unit layers.0 elements [51, 52) are in no shard file"), std::string::npos) << e;
}

TEST(StepProofTest, AMissingTailFails) {
  Step s = Complete(2);
  s.h[1].units[2].count -= 2;
  const std::string e = ProofError(s);
  EXPECT_NE(e.find("unit final elements [8, 10) are in no shard file"), std::string::npos) << e;
}

TEST(StepProofTest, AnOverlapFails) {
  Step s = Complete(2);
  s.h[1].units[0].begin -= 3;  // elements 16..18 of embed are in both files
  s.h[1].units[0].count += 3;
  const std::string e = ProofError(s);
  EXPECT_NE(e.find("unit embed elements [16, 19) are in two shard files"), std::string::npos) << e;
}

TEST(StepProofTest, AHeaderOfAnotherShardFails) {
  Step s = Complete(2);
  s.h[1] = s.h[0];
  EXPECT_NE(ProofError(s).find("holds shard 0 of 2"), std::string::npos) << ProofError(s);
  s = Complete(2);
  s.h[0].shard_count = 4;
  EXPECT_NE(ProofError(s).find("holds shard 0 of 4"), std::string::npos) << ProofError(s);
}

TEST(StepProofTest, AHeaderOfAnotherStepOrModelFails) {
  Step s = Complete(2);
  s.h[0].step = 9;
  EXPECT_NE(ProofError(s).find("does not belong"), std::string::npos);
  s = Complete(2);
  s.h[1].units[2].name = "head";
  EXPECT_NE(ProofError(s).find("unit head disagrees"), std::string::npos);
}

TEST(StepProofTest, FewerFilesThanShardsFails) {
  Step s = Complete(3);
  s.m.files.pop_back();
  s.h.pop_back();
  EXPECT_NE(ProofError(s).find("2 files for 3 shards"), std::string::npos) << ProofError(s);
}

}  // namespace
}  // namespace shard
