// The WorkerGateway's checkpoint reports (CheckpointReportTest of
// job_owners_test_util.h): reports from every writer rank commit the step on
// disk and in the job's progress, and rank 0's carries the metrics it has not
// heartbeated yet; a step folder outside the job's checkpoint dir, a link, or
// one not named for its step is refused; a new attempt forgets the previous
// attempt's reports; a relative step_dir resolves against the workdir; and a
// symlink made after submission cannot lead a commit outside --allowed-root.
#include <gtest/gtest.h>

#include <csignal>

#include "coordinator/jobs/job_paths.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class WorkerGatewayCheckpointTest : public CheckpointReportTest {};

using shard::StatusCode;

// Rank 0's report carries the steps it has not sent with a heartbeat yet: a
// failure right after the commit loses none of them, though the next attempt
// resumes past them and never trains them again.
TEST_F(WorkerGatewayCheckpointTest, ReportCarriesTheMetricsNotYetHeartbeated) {
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  WriteShards(5);
  std::vector<v1::StepMetric> unsent;
  for (int64_t s = 1; s <= 5; ++s) {
    v1::StepMetric m;
    m.set_step(s);
    m.set_loss(10.0 / s);
    m.set_seconds(0.5);
    m.set_tokens(64);
    unsent.push_back(m);
  }
  ASSERT_TRUE(Report(id, 1, 0, 5, StepDir(5), token, unsent).ok());
  auto r1 = Report(id, 1, 1, 5, StepDir(5), token);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_TRUE(r1->committed());
  EXPECT_EQ(Get(id).progress().step(), 5);
  launcher_.Exit(id, 1, 1, 0, SIGKILL);  // before any heartbeat with those steps
  owners_->loop.Tick();
  auto m = owners_->queries.Metrics(id, 0, 0, 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->rows_size(), 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(m->rows(i).step(), i + 1);
    EXPECT_DOUBLE_EQ(m->rows(i).loss(), 10.0 / (i + 1));
    EXPECT_EQ(m->rows(i).attempt(), 1);
  }
}

TEST_F(WorkerGatewayCheckpointTest, ReportsFromEveryWriterCommitTheStep) {
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  WriteShards(5);
  auto r0 = Report(id, 1, 0, 5, StepDir(5), token);
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  EXPECT_FALSE(r0->committed());
  EXPECT_FALSE(fs::exists(StepDir(5) + "/COMMITTED"));
  EXPECT_EQ(Get(id).progress().last_committed_step(), -1);

  auto r1 = Report(id, 1, 1, 5, StepDir(5), token);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_TRUE(r1->committed());
  ASSERT_TRUE(fs::exists(StepDir(5) + "/COMMITTED"));
  auto m = shard::Manifest::FromJson(ReadBytes(StepDir(5) + "/COMMITTED"), "COMMITTED");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->step, 5);
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->files[1].name, shard::ShardFileName(1, 2));
  EXPECT_EQ(m->files[1].size, 120u);
  EXPECT_EQ(m->files[1].xxh64, 0x1001u);
  EXPECT_EQ(Get(id).progress().last_committed_step(), 5);
  EXPECT_EQ(EventKinds(id).back(), "checkpoint_committed");

  auto stored = store_->LoadCheckpoints(id);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].step, 5);
  EXPECT_EQ((*stored)[0].bytes, 220);
  EXPECT_EQ((*stored)[0].files, 2);
  auto listed = owners_->queries.Checkpoints(id);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].step(), 5);
  EXPECT_EQ((*listed)[0].bytes(), 220);
  EXPECT_EQ((*listed)[0].path(), StepDir(5));
}

TEST_F(WorkerGatewayCheckpointTest, StepDirOutsideTheJobsCheckpointDirIsRefused) {
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  for (const std::string& dir : {workdir_ + "/elsewhere/" + shard::StepDirName(5),
                                 workdir_ + "/ckpt/tiny/../other/" + shard::StepDirName(5),
                                 workdir_ + "/ckpt/tiny/" + shard::StepDirName(5) + "/nested", std::string("/tmp")}) {
    auto r = Report(id, 1, 0, 5, dir, token);
    ASSERT_FALSE(r.ok()) << dir;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << dir;
    EXPECT_TRUE(Contains(r.status().message(), workdir_ + "/ckpt/tiny")) << r.status().ToString();
  }
}

// A step folder that is a symbolic link (here to a complete step elsewhere in
// the workdir) is never committed: COMMITTED would land wherever it leads.
TEST_F(WorkerGatewayCheckpointTest, StepDirThatIsALinkIsNeverCommitted) {
  const std::string id = StartRunningJob();
  WriteShards(9);
  fs::create_symlink(StepDir(9), StepDir(5));
  for (int rank : {0, 1}) {
    auto r = Report(id, 1, rank, 5, StepDir(5), TokenOf(id, 1));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status().message(), "a symbolic link")) << r.status().ToString();
  }
  EXPECT_FALSE(fs::exists(StepDir(9) + "/COMMITTED"));
}

// Regression (fixed; coordinator/job_manager.cc, ReportCheckpoint): only the parent of
// step_dir is checked, so a report of step 5 naming .../step_00000009 commits
// a step-5 manifest in the directory that ListSteps and retention read as
// step 9. Enable once the basename must equal shard::StepDirName(step).
TEST_F(WorkerGatewayCheckpointTest, StepDirNotNamedForTheStepIsRefused) {
  const std::string id = StartRunningJob();
  WriteShards(9);
  auto r = Report(id, 1, 0, 5, StepDir(9), TokenOf(id, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// A half-reported step of a dead attempt never commits, even when the next
// attempt reports the missing shard of the same step.
TEST_F(WorkerGatewayCheckpointTest, ANewAttemptForgetsThePreviousAttemptsReports) {
  const std::string id = StartRunningJob();
  WriteShards(5);
  ASSERT_TRUE(Report(id, 1, 0, 5, StepDir(5), TokenOf(id, 1)).ok());
  launcher_.Exit(id, 1, 1, 0, SIGKILL);
  owners_->loop.Tick();
  Advance(3);
  launcher_.SetRunning(id, 1, 0);
  owners_->loop.Tick();
  ASSERT_EQ(Get(id).attempt(), 2);
  auto r = Report(id, 2, 1, 5, StepDir(5), TokenOf(id, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->committed());
  EXPECT_FALSE(fs::exists(StepDir(5) + "/COMMITTED"));
}

// Workers run in the spec's workdir and report step_dir as
// Checkpointer::job_dir() makes it: relative when checkpoint.dir is relative
// (as in configs/jobs/tiny-cpu.yaml). It resolves against the workdir, not
// the coordinator's cwd.
TEST_F(WorkerGatewayCheckpointTest, RelativeStepDirResolvesAgainstTheWorkdir) {
  const std::string id = StartRunningJob();
  WriteShards(5);
  const std::string rel = "ckpt/tiny/" + shard::StepDirName(5);
  auto r0 = Report(id, 1, 0, 5, rel, TokenOf(id, 1));
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  auto r1 = Report(id, 1, 1, 5, rel, TokenOf(id, 1));
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_TRUE(r1->committed());
  EXPECT_TRUE(fs::exists(StepDir(5) + "/COMMITTED"));
  EXPECT_EQ(Get(id).progress().last_committed_step(), 5);
  auto escape = Report(id, 1, 0, 10, "ckpt/other/" + shard::StepDirName(10), TokenOf(id, 1));
  EXPECT_EQ(escape.status().code(), StatusCode::kInvalidArgument);
}

// --allowed-root confines a job's paths where they lead when used, not only
// at submission: a symlink made afterwards in the checkpoint directory gets no
// commit written through it, and the next attempt is refused at launch.
TEST_F(WorkerGatewayCheckpointTest, ASymlinkMadeAfterSubmissionCannotLeadCheckpointsOutsideTheRoots) {
  auto roots = CanonicalRoots({workdir_});
  ASSERT_TRUE(roots.ok()) << roots.status().ToString();
  allowed_roots_ = *roots;
  owners_ = NewOwners(&launcher_);
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  // The job's folder becomes a symlink to somewhere outside the roots.
  fs::create_directories(Path("outside"));
  fs::create_directories(workdir_ + "/ckpt");
  fs::create_symlink(Path("outside"), workdir_ + "/ckpt/tiny");
  WriteShards(5);  // a worker wrote through it
  auto r0 = Report(id, 1, 0, 5, StepDir(5), token);
  ASSERT_FALSE(r0.ok());
  EXPECT_EQ(r0.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(r0.status().message(), "outside the coordinator's allowed roots")) << r0.status().ToString();
  EXPECT_FALSE(Report(id, 1, 1, 5, StepDir(5), token).ok());
  EXPECT_FALSE(fs::exists(Path("outside/") + shard::StepDirName(5) + "/" + shard::kCommittedFile));

  // The attempt fails; its successor is refused before anything is read or launched there.
  launcher_.Exit(id, 1, 0, 1);
  owners_->loop.Tick();
  ASSERT_EQ(State(id), v1::RESTARTING);
  launcher_.SetRunning(id, 1, 0);
  Advance(10);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::FAILED);
  EXPECT_TRUE(Contains(Reason(id), "checkpoint.dir/tiny")) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "symlink")) << Reason(id);
  EXPECT_EQ(launcher_.launches.size(), 1u);
}

}  // namespace
}  // namespace shardd::testing
