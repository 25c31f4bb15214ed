// The sbatch script of one attempt, rendered from the job's resources.slurm:
// the allocation's #SBATCH lines for CPU and GPU shapes, optional settings
// only when set, requeue and the early-warning signal, logs under the
// attempt's log dir, env values that stay inert whatever they hold, no worker
// token in the file, and a script bash accepts.
#include "coordinator/launchers/slurm/slurm_script.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "coordinator/launchers/command.h"
#include "shard/spec/elastic_world.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

constexpr char kToken[] = "0123456789abcdef-worker-token-fedcba9876543210";

LaunchRequest Request(int world) {
  LaunchRequest r;
  r.job_id = "tiny-1";
  r.attempt = 2;
  r.world = world;
  r.workdir = "/shared/work";
  r.log_dir = "/shared/state/jobs/tiny-1/attempt_2";
  r.coordinator = "10.0.0.1:7000";
  r.worker_bin = "/opt/shardd/bin/shardd-worker";
  r.env["SHARDD_WORKER_TOKEN"] = kToken;
  r.job_name = "tiny";
  r.resources.launcher = shard::Launcher::kSlurm;
  return r;
}

// The script's "#SBATCH ..." options, in order, without the prefix.
std::vector<std::string> SbatchOptions(const std::string& script) {
  std::vector<std::string> out;
  std::istringstream in(script);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("#SBATCH ", 0) == 0) out.push_back(line.substr(8));
  return out;
}

bool HasOption(const std::string& script, const std::string& option) {
  const auto opts = SbatchOptions(script);
  return std::find(opts.begin(), opts.end(), option) != opts.end();
}

// Options starting with `prefix` ("--gres=" → every --gres line).
std::vector<std::string> OptionsStarting(const std::string& script, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& o : SbatchOptions(script))
    if (o.rfind(prefix, 0) == 0) out.push_back(o);
  return out;
}

TEST(SlurmScriptTest, JobNameNamesJobAndAttempt) {
  EXPECT_EQ(SlurmJobName("tiny-1", 3), "shardd-tiny-1-a3");
  EXPECT_TRUE(HasOption(RenderSbatchScript(Request(2)), "--job-name=shardd-tiny-1-a2"));
}

TEST(SlurmScriptTest, CpuJobRunsEveryRankAsATaskOnOneNode) {
  const std::string s = RenderSbatchScript(Request(4));
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u) << s;
  EXPECT_TRUE(HasOption(s, "--nodes=1")) << s;
  EXPECT_TRUE(HasOption(s, "--ntasks-per-node=4")) << s;
  EXPECT_TRUE(OptionsStarting(s, "--gpus-per-task").empty()) << s;
  EXPECT_TRUE(OptionsStarting(s, "--gres").empty()) << s;
  EXPECT_TRUE(OptionsStarting(s, "--cpus-per-task").empty()) << s;
  EXPECT_TRUE(HasOption(s, "--export=ALL")) << s;
  EXPECT_TRUE(HasOption(s, "--chdir=/shared/work")) << s;
}

TEST(SlurmScriptTest, TwoNodesOfEightGpusAskForOneGpuPerTask) {
  LaunchRequest r = Request(16);
  r.resources.slurm.gpus_per_node = 8;
  ASSERT_TRUE(r.resources.slurm.Validate(16).ok());
  const std::string s = RenderSbatchScript(r);
  EXPECT_TRUE(HasOption(s, "--nodes=2")) << s;
  EXPECT_TRUE(HasOption(s, "--ntasks-per-node=8")) << s;
  EXPECT_EQ(OptionsStarting(s, "--gpus-per-task"), std::vector<std::string>{"--gpus-per-task=1"}) << s;
  EXPECT_TRUE(OptionsStarting(s, "--gres").empty()) << s;
}

TEST(SlurmScriptTest, GresAsksForTheNodesGpusInsteadOfPerTask) {
  LaunchRequest r = Request(16);
  r.resources.slurm.gpus_per_node = 8;
  r.resources.slurm.gpu_request = shard::GpuRequest::kGres;
  const std::string s = RenderSbatchScript(r);
  EXPECT_TRUE(HasOption(s, "--nodes=2")) << s;
  EXPECT_TRUE(HasOption(s, "--ntasks-per-node=8")) << s;
  EXPECT_EQ(OptionsStarting(s, "--gres"), std::vector<std::string>{"--gres=gpu:8"}) << s;
  EXPECT_TRUE(OptionsStarting(s, "--gpus-per-task").empty()) << s;
}

TEST(SlurmScriptTest, FewerTasksThanGpusGiveEachTaskSeveral) {
  LaunchRequest r = Request(8);
  r.resources.slurm.gpus_per_node = 8;
  r.resources.slurm.tasks_per_node = 4;
  ASSERT_TRUE(r.resources.slurm.Validate(8).ok());
  const std::string s = RenderSbatchScript(r);
  EXPECT_TRUE(HasOption(s, "--nodes=2")) << s;
  EXPECT_TRUE(HasOption(s, "--ntasks-per-node=4")) << s;
  EXPECT_TRUE(HasOption(s, "--gpus-per-task=2")) << s;
}

TEST(SlurmScriptTest, OptionalSettingsAppearOnlyWhenSet) {
  const std::string bare = RenderSbatchScript(Request(2));
  for (const char* p : {"--partition", "--account", "--qos", "--time", "--mem", "--cpus-per-task"})
    EXPECT_TRUE(OptionsStarting(bare, p).empty()) << p << " in\n" << bare;

  LaunchRequest r = Request(2);
  shard::SlurmConfig& c = r.resources.slurm;
  c.partition = "gpu-long";
  c.account = "ml-team";
  c.qos = "high";
  c.time = "24:00:00";
  c.mem = "200G";
  c.cpus_per_task = 12;
  c.sbatch_args = {"--exclusive", "--constraint=h100"};
  const std::string s = RenderSbatchScript(r);
  for (const char* o : {"--partition=gpu-long", "--account=ml-team", "--qos=high", "--time=24:00:00", "--mem=200G",
                        "--cpus-per-task=12", "--exclusive", "--constraint=h100"})
    EXPECT_TRUE(HasOption(s, o)) << o << " missing in\n" << s;
}

TEST(SlurmScriptTest, RequeueIsExplicitEitherWay) {
  LaunchRequest r = Request(2);
  std::string s = RenderSbatchScript(r);
  EXPECT_TRUE(HasOption(s, "--requeue")) << s;
  EXPECT_FALSE(HasOption(s, "--no-requeue")) << s;
  r.resources.slurm.requeue = false;
  s = RenderSbatchScript(r);
  EXPECT_TRUE(HasOption(s, "--no-requeue")) << s;
  EXPECT_FALSE(HasOption(s, "--requeue")) << s;
}

TEST(SlurmScriptTest, EarlyWarningSignalOnlyWhenSignalSecondsArePositive) {
  LaunchRequest r = Request(2);
  r.resources.slurm.signal_s = 300;
  EXPECT_EQ(OptionsStarting(RenderSbatchScript(r), "--signal"), std::vector<std::string>{"--signal=B:USR1@300"});
  r.resources.slurm.signal_s = 0;
  const std::string s = RenderSbatchScript(r);
  EXPECT_TRUE(OptionsStarting(s, "--signal").empty()) << s;
}

TEST(SlurmScriptTest, OutputGoesUnderTheAttemptsLogDir) {
  const std::string s = RenderSbatchScript(Request(2));
  EXPECT_EQ(OptionsStarting(s, "--output"),
            std::vector<std::string>{"--output=/shared/state/jobs/tiny-1/attempt_2/slurm.log"});
  EXPECT_TRUE(Contains(s, "srun --kill-on-bad-exit=0 --output='/shared/state/jobs/tiny-1/attempt_2/rank_%t.log'"))
      << s;
  EXPECT_TRUE(Contains(s, "'/opt/shardd/bin/shardd-worker' --coordinator '10.0.0.1:7000' --job 'tiny-1' --attempt 2"))
      << s;
}

TEST(SlurmScriptTest, WorkerTokenIsNeverInTheScript) {
  LaunchRequest r = Request(2);
  r.resources.slurm.env["OTHER"] = "x";
  const std::string s = RenderSbatchScript(r);
  EXPECT_FALSE(Contains(s, kToken)) << s;
  EXPECT_FALSE(Contains(s, "SHARDD_WORKER_TOKEN=")) << s;
}

class SlurmScriptShellTest : public ScratchTest {};

// A value with spaces, both quotes, a command substitution, backticks and a
// variable is exported as exactly those bytes: bash runs the rendered export
// lines and prints the variable back. (The executed substitutions only touch
// the scratch dir, so a quoting bug fails the test instead of harming the host.)
TEST_F(SlurmScriptShellTest, EnvValuesAreExportedVerbatimAndNeverRun) {
  fs::create_directories(Path("victim"));
  const std::string nasty = "a b  \"c\" 'd' $(rm -rf victim) `touch pwned` $(touch pwned2) $HOME \\ ; exit 3";
  LaunchRequest r = Request(2);
  r.resources.slurm.env["NASTY"] = nasty;
  r.resources.slurm.env["PLAIN"] = "1";
  const std::string s = RenderSbatchScript(r);
  std::string exports;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("export ", 0) == 0) exports += line + "\n";
  ASSERT_TRUE(Contains(exports, "export PLAIN='1'\n")) << s;

  CommandOptions co;
  co.cwd = dir_;
  auto res = RunCommand({"bash", "-c", exports + "printf '%s|%s' \"$NASTY\" \"$PLAIN\""}, co);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->exit_code, 0) << res->err;
  EXPECT_EQ(res->out, nasty + "|1");
  EXPECT_TRUE(fs::exists(Path("victim")));
  EXPECT_FALSE(fs::exists(Path("pwned")));
  EXPECT_FALSE(fs::exists(Path("pwned2")));

  // The destructive classic, checked by text: one single-quoted word.
  r.resources.slurm.env = {{"EVIL", "$(rm -rf /)"}};
  EXPECT_TRUE(Contains(RenderSbatchScript(r), "\nexport EVIL='$(rm -rf /)'\n"));
}

TEST_F(SlurmScriptShellTest, WholeScriptPassesBashSyntaxCheck) {
  LaunchRequest r = Request(16);
  shard::SlurmConfig& c = r.resources.slurm;
  c.gpus_per_node = 8;
  c.partition = "gpu";
  c.time = "1:00:00";
  c.setup = {"module load cuda/12.4", "source /shared/venv/bin/activate"};
  c.env = {{"NCCL_DEBUG", "WARN"}, {"QUOTED", "it's \"fine\" $(x)"}};
  r.workdir = "/shared/my work";  // a space, quoted where the shell sees it
  r.log_dir = "/shared/state/it's/attempt_2";
  const std::string script = Path("job.sbatch");
  WriteBytes(script, RenderSbatchScript(r));
  auto res = RunCommand({"bash", "-n", script});
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->exit_code, 0) << res->err << "\n" << ReadBytes(script);
}

}  // namespace
}  // namespace shardd::testing

namespace shardd::testing {
namespace {

// An elastic attempt on fewer ranks (restart.min_world_size): the request
// carries the job's resources at that size (shard::JobAtWorldSize, as
// AttemptLifecycle::Begin hands them over), and the script asks for fewer
// whole nodes of the same tasks, GPUs and CPUs each.
LaunchRequest ShrunkRequest(int full, int world, const shard::SlurmConfig& slurm) {
  shard::JobConfig job;
  job.parallel.world_size = full;
  job.train.micro_batch = 1;
  job.train.global_batch = 48;  // whole at 16, 8, 4, 3 and 2 ranks
  job.restart.min_world_size = 1;
  job.resources.launcher = shard::Launcher::kSlurm;
  job.resources.slurm = slurm;
  auto at = shard::JobAtWorldSize(job, world);
  EXPECT_TRUE(at.ok()) << at.status().ToString();
  LaunchRequest r = Request(world);
  if (at.ok()) r.resources = at->resources;
  return r;
}

TEST(SlurmScriptTest, AShrunkAttemptAsksForFewerNodesOfTheSameShape) {
  shard::SlurmConfig gpus;
  gpus.gpus_per_node = 8;
  gpus.cpus_per_task = 6;
  const std::string s = RenderSbatchScript(ShrunkRequest(16, 8, gpus));
  EXPECT_TRUE(HasOption(s, "--nodes=1")) << s;
  EXPECT_TRUE(HasOption(s, "--ntasks-per-node=8")) << s;
  EXPECT_TRUE(HasOption(s, "--gpus-per-task=1")) << s;
  EXPECT_TRUE(HasOption(s, "--cpus-per-task=6")) << s;
  EXPECT_NE(s.find("(8 ranks)"), std::string::npos) << s;

  shard::SlurmConfig two_nodes;  // CPU workers spread over nodes: 2 tasks each
  two_nodes.nodes = 2;
  const std::string c = RenderSbatchScript(ShrunkRequest(4, 2, two_nodes));
  EXPECT_TRUE(HasOption(c, "--nodes=1")) << c;
  EXPECT_TRUE(HasOption(c, "--ntasks-per-node=2")) << c;

  shard::SlurmConfig one_node;  // CPU workers on one node: its task count shrinks
  const std::string o = RenderSbatchScript(ShrunkRequest(4, 3, one_node));
  EXPECT_TRUE(HasOption(o, "--nodes=1")) << o;
  EXPECT_TRUE(HasOption(o, "--ntasks-per-node=3")) << o;
}

}  // namespace
}  // namespace shardd::testing
