// Confinement of job paths to allowed roots: which keys are paths, how they
// resolve against the workdir, and that neither "..", a symlink nor a sibling
// with a common prefix (/data2 beside /data) gets out; and that a submission
// outside the roots is refused naming the key before anything is created.
#include "coordinator/jobs/job_paths.h"

#include <gtest/gtest.h>

#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

class JobPathsTest : public ScratchTest {
 protected:
  void SetUp() override {
    ScratchTest::SetUp();
    if (HasFatalFailure()) return;
    fs::create_directories(Path("root/work"));
    fs::create_directories(Path("root2"));
    fs::create_directories(Path("outside"));
    auto roots = CanonicalRoots({Path("root")});
    ASSERT_TRUE(roots.ok()) << roots.status().ToString();
    root_ = (*roots)[0];
  }
  std::string root_;
};

TEST_F(JobPathsTest, ListsEveryPathKeyResolvedAgainstTheWorkdir) {
  shard::JobConfig c;
  c.model.from_hf = "/models/llama";
  c.data.jsonl = "data/sft.jsonl";
  c.data.tokenizer = "tok/tokenizer.json";
  c.data.prepared = "prep/sft";
  c.checkpoint.dir = "../ckpt";
  c.checkpoint.resume = "ckpt/job/step_00000010";
  c.export_.hf_dir = "out/hf";
  c.checkpoint.memory.every_steps = 5;
  c.checkpoint.memory.dir = "/dev/shm/mine";
  const std::vector<JobPath> paths = JobPaths(c, "/w/job");
  std::map<std::string, std::pair<std::string, bool>> got;
  for (const JobPath& p : paths) got[p.key] = {p.path, p.must_exist};
  const std::map<std::string, std::pair<std::string, bool>> want = {
      {"model.from_hf", {"/models/llama", true}},
      {"data.jsonl", {"/w/job/data/sft.jsonl", true}},
      {"data.tokenizer", {"/w/job/tok/tokenizer.json", true}},
      {"data.prepared", {"/w/job/prep/sft", false}},
      {"checkpoint.dir", {"/w/ckpt", false}},
      {"checkpoint.memory.dir", {"/dev/shm/mine", false}},  // named by the job: confined too
      {"checkpoint.resume", {"/w/job/ckpt/job/step_00000010", true}},
      {"export.hf_dir", {"/w/job/out/hf", false}},
  };
  EXPECT_EQ(got, want);
}

TEST_F(JobPathsTest, NamesThatAreNotPathsAreLeftOut) {
  shard::JobConfig c;  // tokenizer byte, resume auto, checkpoint.dir "runs"
  c.data.tokens = "t.u32";
  std::vector<std::string> keys;
  for (const JobPath& p : JobPaths(c, "/w")) keys.push_back(p.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"data.tokens", "checkpoint.dir"}));
  c.checkpoint.resume = "none";
  c.data.tokenizer = "unused/tokenizer.json";  // a token-file job reads no tokenizer
  EXPECT_EQ(JobPaths(c, "/w").size(), 2u);
}

TEST_F(JobPathsTest, InsideComparesWholeComponentsAfterDotDot) {
  EXPECT_TRUE(IsInside(root_, root_));
  EXPECT_TRUE(IsInside(root_ + "/work/not/yet/created", root_));
  EXPECT_TRUE(IsInside(root_ + "/work/../work/x", root_));
  EXPECT_FALSE(IsInside(root_ + "/../outside", root_));
  EXPECT_FALSE(IsInside(root_ + "/work/../../outside/x", root_));
  EXPECT_FALSE(IsInside(root_ + "2", root_));  // a sibling sharing the prefix
  EXPECT_FALSE(IsInside(root_ + "2/x", root_));
  EXPECT_TRUE(IsInside("/anything/at/all", "/"));
  EXPECT_TRUE(IsInside(root_ + "/work", root_ + "/"));
}

TEST_F(JobPathsTest, SymlinksAreFollowedWhereTheyAlreadyExist) {
  fs::create_directory_symlink(Path("outside"), Path("root/escape"));
  EXPECT_FALSE(IsInside(root_ + "/escape", root_));
  EXPECT_FALSE(IsInside(root_ + "/escape/new/ckpt", root_));
  // A root given through a symlink is made canonical, so paths under its real
  // location are inside it.
  fs::create_directory_symlink(Path("root"), Path("link-to-root"));
  auto roots = CanonicalRoots({Path("link-to-root")});
  ASSERT_TRUE(roots.ok()) << roots.status().ToString();
  EXPECT_EQ((*roots)[0], root_);
  EXPECT_TRUE(IsInside(Path("link-to-root/work/x"), (*roots)[0]));
}

TEST_F(JobPathsTest, MissingRootIsAnErrorNamingIt) {
  auto roots = CanonicalRoots({Path("root"), Path("nowhere")});
  ASSERT_FALSE(roots.ok());
  EXPECT_EQ(roots.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(roots.status().message(), Path("nowhere"))) << roots.status().ToString();
  WriteBytes(Path("a-file"), "x");
  EXPECT_FALSE(CanonicalRoots({Path("a-file")}).ok());
}

TEST_F(JobPathsTest, CheckNamesTheFirstPathOutside) {
  const std::string work = root_ + "/work";
  const std::vector<JobPath> inside = {{"data.tokens", work + "/t.u32", true}, {"checkpoint.dir", work + "/ckpt", false}};
  EXPECT_TRUE(CheckConfined("job.yaml", work, inside, {}).ok());
  EXPECT_TRUE(CheckConfined("job.yaml", work, inside, {root_}).ok());

  std::vector<JobPath> out = inside;
  out.push_back({"export.hf_dir", Path("outside/hf"), false});
  shard::Status st = CheckConfined("job.yaml", work, out, {root_});
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(st.message(), "job.yaml: export.hf_dir: " + Path("outside/hf"))) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), root_)) << st.ToString();
  // A second root admits it.
  auto both = CanonicalRoots({Path("root"), Path("outside")});
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE(CheckConfined("job.yaml", work, out, *both).ok());

  st = CheckConfined("job.yaml", Path("outside"), inside, {root_});
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(st.message(), "workdir " + Path("outside"))) << st.ToString();
}

// Through the JobManager: the workdir and every path of the job must be
// inside the roots; a refusal creates nothing.
TEST_F(JobManagerTest, PathsOutsideTheAllowedRootsAreRefusedNamingTheKey) {
  auto roots = CanonicalRoots({workdir_});
  ASSERT_TRUE(roots.ok()) << roots.status().ToString();
  allowed_roots_ = *roots;
  manager_ = NewManager(&launcher_);
  EXPECT_TRUE(manager_->Submit(Spec(JobYaml("inside"))).ok());

  auto st = manager_->Submit(Spec(JobYaml("escape"), {"checkpoint.dir=../ckpt"}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(st.status().message(), "checkpoint.dir")) << st.status().ToString();
  EXPECT_FALSE(fs::exists(Path("ckpt")));

  // Outside and missing: the confinement answers first (no probing of paths
  // outside the roots through the existence check).
  st = manager_->Submit(Spec(JobYaml("abs"), {"data.tokens=" + Path("secret.u32")}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(st.status().message(), "data.tokens")) << st.status().ToString();

  v1::JobSpec spec = Spec(JobYaml("elsewhere"));
  fs::create_directories(Path("other"));
  spec.set_workdir(Path("other"));
  st = manager_->Submit(spec);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(st.status().message(), "workdir")) << st.status().ToString();
  EXPECT_EQ(manager_->List(true).size(), 1u);
}

TEST_F(JobManagerTest, MissingJsonlIsNotFoundNamingTheKey) {
  auto st = manager_->Submit(Spec(JobYaml(), {"data.tokens=", "data.jsonl=data/missing.jsonl"}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(st.status().message(), "data.jsonl: " + workdir_ + "/data/missing.jsonl"))
      << st.status().ToString();
}

}  // namespace
}  // namespace shardd::testing
