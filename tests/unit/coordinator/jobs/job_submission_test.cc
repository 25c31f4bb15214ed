// JobSubmission, over the owners of job_owners_test_util.h: a job file is
// checked before anything runs, and every refusal says what to fix (the
// unknown key, the missing path, the limit). A valid job is QUEUED and the
// control loop's next Tick launches it with one process per rank and its
// attempt token in the environment (with TLS, the files' paths); a launch
// error fails it at once, a transient one restarts it. Cancel of a queued job
// launches nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "shard/spec/llama_config.h"
#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class JobSubmissionTest : public JobOwnersTest {};

using shard::StatusCode;

TEST_F(JobSubmissionTest, UnknownKeyIsRefusedNamingTheKey) {
  std::string yaml = JobYaml();
  yaml.replace(yaml.find("micro_batch: 2"), 14, "micro_batch: 2, stepz: 3");
  auto st = owners_->submission.Submit(Spec(yaml));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st.status().message(), "stepz")) << st.status().ToString();
  EXPECT_TRUE(Contains(st.status().message(), "jobs/tiny.yaml")) << st.status().ToString();
  EXPECT_TRUE(owners_->queries.List(true).empty());
}

TEST_F(JobSubmissionTest, MissingTokenFileIsNotFoundNamingTheResolvedPath) {
  auto st = owners_->submission.Submit(Spec(JobYaml(), {"data.tokens=data/missing.u32"}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(st.status().message(), workdir_ + "/data/missing.u32")) << st.status().ToString();
  EXPECT_TRUE(Contains(st.status().message(), "data.tokens")) << st.status().ToString();
}

// checkpoint.memory.dir must be a folder the job can own and create files
// in: /dev/null, a file or another user's folder is refused at submission
// with one line naming it (not every attempt dying with DATA_LOSS); a folder
// not made yet is fine.
TEST_F(JobSubmissionTest, AMemoryDirTheJobCannotWriteIsRefused) {
  const std::string file = Path("a-file");
  std::ofstream(file) << "x";
  for (const auto& [dir, why] : std::vector<std::pair<std::string, std::string>>{
           {"/dev/null", "/dev/null is not a directory"},
           {file, file + " is not a directory"},
           {file + "/below", file + "/below cannot be created: " + file + " is not a directory"}}) {
    auto st = owners_->submission.Submit(Spec(JobYaml(), {"checkpoint.memory.every_steps=5", "checkpoint.memory.dir=" + dir}));
    ASSERT_FALSE(st.ok()) << dir;
    EXPECT_EQ(st.status().message(), "jobs/tiny.yaml: checkpoint.memory.dir: " + why);
  }
  if (::geteuid() == 0) {
    const std::string theirs = Path("theirs");
    fs::create_directories(theirs);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    auto st = owners_->submission.Submit(Spec(JobYaml(), {"checkpoint.memory.every_steps=5", "checkpoint.memory.dir=" + theirs}));
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(Contains(st.status().message(), theirs + " belongs to uid 65534")) << st.status().ToString();
  }
  EXPECT_TRUE(owners_->queries.List(true).empty());
  auto fine = owners_->submission.Submit(
      Spec(JobYaml(), {"checkpoint.memory.every_steps=5", "checkpoint.memory.dir=" + Path("shm/not-yet")}));
  EXPECT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_FALSE(fs::exists(Path("shm"))) << "submission creates nothing";
}

TEST_F(JobSubmissionTest, SlurmLauncherIsUnimplemented) {
  auto st = owners_->submission.Submit(Spec(JobYaml(), {"resources.launcher=slurm"}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(st.status().message(), "slurm")) << st.status().ToString();
}

TEST_F(JobSubmissionTest, OversizedSpecIsRefusedWithTheLimit) {
  const std::string yaml = JobYaml() + "# " + std::string(1 << 20, 'x') + "\n";
  auto st = owners_->submission.Submit(Spec(yaml));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st.status().message(), std::to_string(1 << 20))) << st.status().ToString();
}

TEST_F(JobSubmissionTest, RelativeOrMissingWorkdirIsRefused) {
  v1::JobSpec spec = Spec(JobYaml());
  spec.set_workdir("work");
  auto st = owners_->submission.Submit(spec);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st.status().message(), "absolute")) << st.status().ToString();

  spec.set_workdir(Path("nowhere"));
  st = owners_->submission.Submit(spec);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(st.status().message(), Path("nowhere"))) << st.status().ToString();
}

// Two active jobs of the same name would write the same checkpoint directory.
TEST_F(JobSubmissionTest, SameNameWhileActiveIsRefusedUntilTheFirstEnds) {
  const std::string first = SubmitJob();
  auto st = owners_->submission.Submit(Spec(JobYaml()));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st.status().message(), first)) << st.status().ToString();

  ASSERT_TRUE(owners_->submission.Cancel(first, "").ok());
  auto again = owners_->submission.Submit(Spec(JobYaml()));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_NE(again->id(), first);
}

// Regression (fixed; coordinator/job_manager.cc, ValidateSpecLocked): the job name becomes
// the id and a path component (<state_dir>/jobs/<id>/, <checkpoint.dir>/<name>)
// unchecked, so "../x" writes logs and checkpoints outside those directories.
// Enable once names are limited to [A-Za-z0-9._-]+ (not "." or "..").
TEST_F(JobSubmissionTest, JobNameThatIsNotAPlainFileNameIsRefused) {
  for (const std::string name : {"../escape", "a/b", ".."}) {
    auto st = owners_->submission.Submit(Spec(JobYaml(name)));
    ASSERT_FALSE(st.ok()) << name;
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_TRUE(Contains(st.status().message(), "name")) << st.status().ToString();
  }
}

TEST_F(JobSubmissionTest, SubmitQueuesAndTickLaunchesEveryRankWithAToken) {
  auto st = owners_->submission.Submit(Spec(JobYaml()));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const std::string id = st->id();
  EXPECT_EQ(id, "tiny-1");
  EXPECT_EQ(st->state(), v1::QUEUED);
  EXPECT_EQ(st->world_size(), 2);
  EXPECT_EQ(st->checkpoint_dir(), workdir_ + "/ckpt/tiny");
  EXPECT_TRUE(launcher_.launches.empty()) << "launched before the control loop ran";

  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::LAUNCHING);
  EXPECT_EQ(Get(id).attempt(), 1);
  ASSERT_EQ(launcher_.launches.size(), 1u);
  const LaunchRequest& req = launcher_.launches[0];
  EXPECT_EQ(req.job_id, id);
  EXPECT_EQ(req.attempt, 1);
  EXPECT_EQ(req.world, 2);
  EXPECT_EQ(req.workdir, workdir_);
  EXPECT_EQ(req.coordinator, "127.0.0.1:7000");
  EXPECT_EQ(req.worker_bin, "/opt/shardd/bin/shardd-worker");
  EXPECT_EQ(req.log_dir, Path("state") + "/jobs/" + id + "/attempt_1");
  ASSERT_EQ(req.env.count("SHARDD_WORKER_TOKEN"), 1u);
  EXPECT_EQ(req.env.at("SHARDD_WORKER_TOKEN").size(), 48u);
  EXPECT_EQ(req.env.count("SHARDD_TLS_CA"), 0u) << "plaintext";
  EXPECT_EQ(req.env.count("SHARDD_TLS_CERT"), 0u);
  EXPECT_EQ(req.env.count("SHARDD_TLS_KEY"), 0u);

  v1::JobStatus s = Get(id);
  ASSERT_EQ(s.workers_size(), 2);
  EXPECT_EQ(s.workers(0).pid(), 4000);
  EXPECT_EQ(s.workers(1).pid(), 4001);

  owners_->loop.Tick();  // nothing more to launch
  EXPECT_EQ(launcher_.launches.size(), 1u);

  // Job numbers keep counting.
  auto second = owners_->submission.Submit(Spec(JobYaml("other")));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->id(), "other-2");
}

// With TLS every launcher hands the workers the coordinator's CA and, for
// mutual TLS, the client certificate and key to present, by path.
TEST_F(JobSubmissionTest, LaunchPassesTheTlsFilesInTheEnvironment) {
  owners_.reset();
  JobManagerOptions o;
  o.worker_tls_ca = "/etc/shardd/ca.pem";
  o.worker_tls_cert = "/etc/shardd/worker.pem";
  o.worker_tls_key = "/etc/shardd/worker.key";
  owners_ = NewOwners(&launcher_, o);
  SubmitJob();
  owners_->loop.Tick();
  ASSERT_EQ(launcher_.launches.size(), 1u);
  const auto& env = launcher_.launches[0].env;
  ASSERT_EQ(env.count("SHARDD_TLS_CA"), 1u);
  EXPECT_EQ(env.at("SHARDD_TLS_CA"), "/etc/shardd/ca.pem");
  ASSERT_EQ(env.count("SHARDD_TLS_CERT"), 1u);
  EXPECT_EQ(env.at("SHARDD_TLS_CERT"), "/etc/shardd/worker.pem");
  ASSERT_EQ(env.count("SHARDD_TLS_KEY"), 1u);
  EXPECT_EQ(env.at("SHARDD_TLS_KEY"), "/etc/shardd/worker.key");
}

// A launcher that cannot start the workers fails the job at once (retrying
// would fail the same way) and says why.
TEST_F(JobSubmissionTest, LaunchErrorFailsTheJobNamingTheError) {
  launcher_.launch_error = shard::NotFound("worker binary /x is not executable");
  const std::string id = SubmitJob();
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::FAILED);
  EXPECT_TRUE(Contains(Reason(id), "launch failed")) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "/x is not executable")) << Reason(id);
}

// A cluster that is briefly unreachable at launch is worth another attempt.
TEST_F(JobSubmissionTest, TransientLaunchErrorRestarts) {
  launcher_.launch_error = shard::Unavailable("sbatch: Socket timed out on send/recv operation");
  const std::string id = SubmitJob();
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::RESTARTING) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "Socket timed out")) << Reason(id);
}

// A relative model.from_hf is the submitter's (the workdir's), for the planner
// too: it reads config.json there, not in the daemon's cwd, and so plans the
// job rather than skipping the plan.
TEST_F(JobSubmissionTest, PlanAtSubmitReadsARelativeFromHfInTheWorkdir) {
  auto tiny = shard::LlamaPreset("tiny");
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  WriteBytes(workdir_ + "/hf/config.json", tiny->ToHfConfigJson());
  std::string yaml = JobYaml();
  yaml.replace(yaml.find("{preset: tiny}"), 14, "{from_hf: hf}");
  auto st = owners_->submission.Submit(Spec(yaml));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  std::vector<v1::JobEvent> past;
  auto watch = owners_->queries.Watch(st->id(), 0, [](const v1::JobEvent&) {}, &past);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_FALSE(past.empty());
  EXPECT_EQ(past[0].kind(), "submitted");
  EXPECT_FALSE(Contains(past[0].message(), "plan skipped")) << past[0].message();
  EXPECT_TRUE(Contains(past[0].message(), "fits")) << past[0].message();
}

TEST_F(JobSubmissionTest, CancelOfAQueuedJobLaunchesNothing) {
  const std::string id = SubmitJob();
  ASSERT_TRUE(owners_->submission.Cancel(id, "changed my mind").ok());
  owners_->loop.Tick();
  EXPECT_TRUE(launcher_.launches.empty());
  EXPECT_TRUE(launcher_.terminates.empty());
  EXPECT_EQ(Reason(id), "changed my mind");
  EXPECT_TRUE(owners_->queries.Drained(id));
}

}  // namespace
}  // namespace shardd::testing
