// The job file's cluster sections: resources.slurm and resources.kubernetes map
// strictly (every key, unknown keys and wrong types named by their dotted
// path) and validate their shape against parallel.world_size before any
// launcher sees them.
#include "shard/spec/job_config.h"

#include "shard/common/yaml_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace shard {
namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A valid job of `world` ranks with `resources` as its resources section.
std::string Job(const std::string& resources, int world = 16) {
  return "name: big\n"
         "model: {preset: tiny}\n"
         "data: {tokens: data/tokens.u32, seq_len: 16}\n"
         "train: {steps: 10, global_batch: " +
         std::to_string(world * 2) +
         ", micro_batch: 2}\n"
         "parallel: {world_size: " +
         std::to_string(world) + "}\nresources:\n" + resources;
}

// Parses and expects an InvalidArgument naming every one of `parts`.
void ExpectRefused(const std::string& yaml, std::initializer_list<std::string> parts) {
  auto job = ParseJobConfig(yaml, "job.yaml");
  ASSERT_FALSE(job.ok()) << yaml;
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << job.status().ToString();
  for (const std::string& p : parts) EXPECT_TRUE(Contains(job.status().message(), p)) << job.status().ToString();
}

// The job's name becomes a directory (checkpoints, logs, state) wherever the
// job runs: shardctl launch, a standalone worker and the coordinator all parse
// it here, so all of them refuse a name that is not one plain path component.
TEST(JobNameTest, NamesThatAreNotPlainFileNamesAreRefusedByEveryParse) {
  const std::string rest = Job("  device: cpu\n", 2).substr(std::string("name: big\n").size());
  for (const std::string name : {"/etc", "../..", "..", ".", "a/b", "", "x y", "run$1"}) {
    const std::string yaml = "name: '" + name + "'\n" + rest;
    ExpectRefused(yaml, {"job.yaml", "name: '" + name + "'", "plain file name"});
  }
  ExpectRefused("name: " + std::string(300, 'a') + "\n" + rest, {"name", "300 characters", "too long"});
  EXPECT_TRUE(ParseJobConfig("name: my-job_1.2\n" + rest, "job.yaml").ok());
  // An override is held to the same rule.
  auto job = ParseJobConfig("name: fine\n" + rest, "job.yaml", {"name=../escape"});
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(Contains(job.status().message(), "plain file name")) << job.status().ToString();
}

// priority: an int for the local queue (docs/scheduling.md), bounded.
TEST(PriorityTest, ReadBoundedAndNamed) {
  const std::string rest = Job("  device: cpu\n", 2).substr(std::string("name: big\n").size());
  auto job = ParseJobConfig("name: p\npriority: 7\n" + rest, "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->priority, 7);
  EXPECT_EQ(ParseJobConfig("name: p\n" + rest, "job.yaml")->priority, 0);
  ExpectRefused("name: p\npriority: 5000\n" + rest, {"job.yaml", "priority: 5000 is outside -1000..1000"});
  ExpectRefused("name: p\npriority: high\n" + rest, {"job.yaml", "priority"});
}

TEST(SlurmConfigTest, EveryKeyIsRead) {
  auto job = ParseJobConfig(Job("  launcher: slurm\n"
                                "  slurm:\n"
                                "    nodes: 2\n"
                                "    tasks_per_node: 8\n"
                                "    gpus_per_node: 8\n"
                                "    gpu_request: gres\n"
                                "    cpus_per_task: 12\n"
                                "    partition: gpu\n"
                                "    account: ml-team\n"
                                "    qos: high\n"
                                "    time: \"24:00:00\"\n"
                                "    mem: 200G\n"
                                "    requeue: false\n"
                                "    signal_s: 300\n"
                                "    sbatch_args: [--exclusive, \"--constraint=h100\"]\n"
                                "    setup: [module load cuda, source /shared/venv/bin/activate]\n"
                                "    env: {NCCL_DEBUG: WARN, OMP_NUM_THREADS: 4}\n"
                                "    poll_interval_s: 5\n"),
                            "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const SlurmConfig& c = job->resources.slurm;
  EXPECT_EQ(job->resources.launcher, Launcher::kSlurm);
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.tasks_per_node, 8);
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_EQ(c.gpu_request, GpuRequest::kGres);
  EXPECT_EQ(c.cpus_per_task, 12);
  EXPECT_EQ(c.partition, "gpu");
  EXPECT_EQ(c.account, "ml-team");
  EXPECT_EQ(c.qos, "high");
  EXPECT_EQ(c.time, "24:00:00");
  EXPECT_EQ(c.mem, "200G");
  EXPECT_FALSE(c.requeue);
  EXPECT_EQ(c.signal_s, 300);
  EXPECT_EQ(c.sbatch_args, (std::vector<std::string>{"--exclusive", "--constraint=h100"}));
  EXPECT_EQ(c.setup, (std::vector<std::string>{"module load cuda", "source /shared/venv/bin/activate"}));
  EXPECT_EQ(c.env, (std::map<std::string, std::string>{{"NCCL_DEBUG", "WARN"}, {"OMP_NUM_THREADS", "4"}}));
  EXPECT_DOUBLE_EQ(c.poll_interval_s, 5);
  EXPECT_EQ(c.Nodes(16), 2);
  EXPECT_EQ(c.TasksPerNode(16), 8);
}

TEST(SlurmConfigTest, DefaultsDeriveTheShape) {
  auto cpu = ParseJobConfig(Job("  launcher: slurm\n", 4), "job.yaml");
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  const SlurmConfig& c = cpu->resources.slurm;
  EXPECT_EQ(c.Nodes(4), 1);
  EXPECT_EQ(c.TasksPerNode(4), 4);
  EXPECT_TRUE(c.requeue);
  EXPECT_EQ(c.signal_s, 120);
  EXPECT_EQ(c.gpu_request, GpuRequest::kGpusPerTask);

  auto gpu = ParseJobConfig(Job("  launcher: slurm\n  slurm: {gpus_per_node: 8}\n"), "job.yaml");
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ(gpu->resources.slurm.Nodes(16), 2);
  EXPECT_EQ(gpu->resources.slurm.TasksPerNode(16), 8);
}

TEST(SlurmConfigTest, UnknownKeyIsNamedWithItsPath) {
  ExpectRefused(Job("  launcher: slurm\n  slurm: {partiton: gpu}\n"), {"job.yaml", "resources.slurm.partiton"});
}

TEST(SlurmConfigTest, WrongTypesAndValuesAreNamed) {
  ExpectRefused(Job("  launcher: slurm\n  slurm: {gpu_request: gpus}\n"), {"resources.slurm.gpu_request"});
  ExpectRefused(Job("  launcher: slurm\n  slurm: {requeue: maybe}\n"), {"resources.slurm.requeue"});
  ExpectRefused(Job("  launcher: slurm\n  slurm: {env: [A, B]}\n"), {"resources.slurm.env", "mapping"});
  ExpectRefused(Job("  launcher: slurm\n  slurm: {sbatch_args: --exclusive}\n"), {"resources.slurm.sbatch_args"});
}

TEST(SlurmConfigTest, ShapeNotMatchingTheWorldIsRefused) {
  ExpectRefused(Job("  launcher: slurm\n  slurm: {nodes: 3}\n"), {"3 node(s)", "world_size 16"});
  ExpectRefused(Job("  launcher: slurm\n  slurm: {nodes: 2, tasks_per_node: 4}\n"),
                {"2 node(s) x 4 task(s)", "world_size 16"});
  ExpectRefused(Job("  launcher: slurm\n  slurm: {gpus_per_node: 6}\n"), {"world_size 16"});
  ExpectRefused(Job("  launcher: slurm\n  slurm: {nodes: -1}\n"), {"negative"});
}

TEST(SlurmConfigTest, GpusThatDoNotSplitOverTheTasksAreRefused) {
  ExpectRefused(Job("  launcher: slurm\n  slurm: {nodes: 4, tasks_per_node: 4, gpus_per_node: 6}\n"),
                {"gpus_per_node 6", "tasks_per_node 4"});
}

TEST(SlurmConfigTest, SbatchArgsMustBeSingleOptions) {
  ExpectRefused(Job("  launcher: slurm\n  slurm: {sbatch_args: [exclusive]}\n"),
                {"resources.slurm.sbatch_args", "'exclusive'"});
  ExpectRefused(Job("  launcher: slurm\n  slurm: {sbatch_args: [\"--exclusive\\nrm -rf /\"]}\n"),
                {"resources.slurm.sbatch_args"});
  ExpectRefused(Job("  launcher: slurm\n  slurm: {partition: \"gpu\\n#SBATCH --qos=top\"}\n"), {"line break"});
}

TEST(SlurmConfigTest, EnvNamesMustBeShellVariables) {
  for (const std::string name : {"1ABC", "A-B", "A B", "A$(x)"}) {
    ExpectRefused(Job("  launcher: slurm\n  slurm:\n    env: {\"" + name + "\": v}\n"),
                  {"resources.slurm.env", "'" + name + "'"});
  }
  ExpectRefused(Job("  launcher: slurm\n  slurm: {env: {A: \"x\\ny\"}}\n"), {"resources.slurm.env"});
  EXPECT_TRUE(ParseJobConfig(Job("  launcher: slurm\n  slurm: {env: {_A1: \"$(not run) 'q'\"}}\n"), "job.yaml").ok());
}

TEST(SlurmConfigTest, SlurmShapeIsCheckedOnlyForSlurmJobs) {
  auto job = ParseJobConfig(Job("  launcher: local\n  slurm: {nodes: 3}\n"), "job.yaml");
  EXPECT_TRUE(job.ok()) << job.status().ToString();
}

TEST(SlurmConfigTest, OverridesReachTheSlurmSection) {
  auto job = ParseJobConfig(Job("  launcher: local\n", 16), "job.yaml",
                            {"resources.launcher=slurm", "resources.slurm.gpus_per_node=8",
                             "resources.slurm.partition=debug"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->resources.slurm.partition, "debug");
  EXPECT_EQ(job->resources.slurm.Nodes(16), 2);
}

std::string Kube(const std::string& body) { return Job("  launcher: kubernetes\n  kubernetes:\n" + body, 4); }

TEST(KubernetesConfigTest, ImageAndPvcAreRequiredByName) {
  ExpectRefused(Kube("    pvc: shared\n"), {"resources.kubernetes.image"});
  ExpectRefused(Kube("    image: shardd:1\n"), {"resources.kubernetes.pvc"});
}

TEST(KubernetesConfigTest, MapsParseAndAListWhereAMapBelongsIsNamed) {
  auto job = ParseJobConfig(Kube("    image: shardd:1\n"
                                 "    pvc: shared\n"
                                 "    namespace: ml\n"
                                 "    gpus_per_node: 2\n"
                                 "    node_selector: {gpu: h100, zone: a}\n"
                                 "    labels: {team: ml}\n"
                                 "    env: {NCCL_DEBUG: INFO}\n"),
                            "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const KubernetesConfig& k = job->resources.kubernetes;
  EXPECT_EQ(k.namespace_, "ml");
  EXPECT_EQ(k.node_selector, (std::map<std::string, std::string>{{"gpu", "h100"}, {"zone", "a"}}));
  EXPECT_EQ(k.labels, (std::map<std::string, std::string>{{"team", "ml"}}));
  EXPECT_EQ(k.env.at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(k.Nodes(4), 2);
  EXPECT_EQ(k.ProcsPerNode(4), 2);

  ExpectRefused(Kube("    image: shardd:1\n    pvc: shared\n    node_selector: [gpu, h100]\n"),
                {"resources.kubernetes.node_selector", "mapping"});
  ExpectRefused(Kube("    image: shardd:1\n    pvc: shared\n    labels: {team: {nested: x}}\n"),
                {"resources.kubernetes.labels.team"});
  ExpectRefused(Kube("    image: shardd:1\n    pvc: shared\n    imagee: x\n"), {"resources.kubernetes.imagee"});
  ExpectRefused(Kube("    image: shardd:1\n    pvc: shared\n    mount_path: rel\n"), {"mount_path"});
}

// A cluster launcher that asks for GPUs makes device: auto mean cuda; CPU
// shapes and explicit devices are left alone.
TEST(ClusterDeviceTest, AutoMeansCudaWhenTheLauncherAsksForGpus) {
  auto slurm = ParseJobConfig(Job("  launcher: slurm\n  slurm: {nodes: 2, gpus_per_node: 8}\n"), "job.yaml");
  ASSERT_TRUE(slurm.ok()) << slurm.status().ToString();
  EXPECT_EQ(slurm->resources.device.ToString(), "cuda");
  auto k8s = ParseJobConfig(
      Job("  launcher: kubernetes\n  kubernetes: {image: img, pvc: data, nodes: 2, gpus_per_node: 8}\n"), "job.yaml");
  ASSERT_TRUE(k8s.ok()) << k8s.status().ToString();
  EXPECT_EQ(k8s->resources.device.ToString(), "cuda");
  auto cpu = ParseJobConfig(Job("  launcher: slurm\n  slurm: {nodes: 2}\n"), "job.yaml");
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(cpu->resources.device.ToString(), "auto");
  auto pinned = ParseJobConfig(Job("  launcher: slurm\n  device: cpu\n  slurm: {nodes: 2, gpus_per_node: 8}\n"),
                               "job.yaml");
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->resources.device.ToString(), "cpu");
}

// Closed sets are parsed once, when the job file is read: the typed values
// reach every reader, and a bad value is refused with the file and key.
TEST(JobSpecTest, ClosedSetsAreTypedWhenRead) {
  auto job = ParseJobConfig(Job("  launcher: kubernetes\n  device: cuda:3\n"
                                "  kubernetes: {image: i, pvc: p, nodes: 2, gpus_per_node: 8}\n"),
                            "job.yaml",
                            {"parallel.strategy=hybrid_shard", "parallel.shard_group_size=8", "train.precision=bf16",
                             "parallel.reduce_dtype=bf16", "train.loss_scale=1024", "train.schedule=linear",
                             "export.dtype=fp16"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->resources.launcher, Launcher::kKubernetes);
  EXPECT_EQ(job->resources.device.kind, DeviceSpec::Kind::kCuda);
  EXPECT_EQ(job->resources.device.index, 3);
  EXPECT_EQ(job->parallel.strategy, ShardStrategy::kHybridShard);
  EXPECT_EQ(job->train.precision, Precision::kBf16);
  EXPECT_EQ(job->parallel.reduce_dtype, DType::kBF16);
  EXPECT_EQ(job->train.loss_scale.kind, LossScaleKind::kStatic);
  EXPECT_EQ(job->train.loss_scale.value, 1024.0);
  EXPECT_EQ(job->train.optim.schedule, Schedule::kLinear);
  EXPECT_EQ(job->export_.dtype, DType::kF16);
  for (const auto& [set, key] : std::vector<std::pair<std::string, std::string>>{
           {"resources.device=gpu", "resources.device: 'gpu' is not one of: auto, cpu, cuda, cuda:N"},
           {"resources.device=cuda:x", "resources.device"},
           {"resources.launcher=docker", "resources.launcher: 'docker' is not one of: local, slurm, kubernetes, external"},
           {"parallel.strategy=zero3", "parallel.strategy: 'zero3' is not one of"},
           {"export.dtype=int8", "export.dtype: 'int8' is not one of: fp32, bf16, fp16"},
           {"train.loss_scale=lots", "train.loss_scale"}}) {
    auto bad = ParseJobConfig(Job(""), "job.yaml", {set});
    ASSERT_FALSE(bad.ok()) << set;
    EXPECT_TRUE(Contains(bad.status().message(), "job.yaml")) << bad.status().ToString();
    EXPECT_TRUE(Contains(bad.status().message(), key)) << bad.status().ToString();
  }
}

// <checkpoint.dir>/<name>: the one rule, relative to the job's workdir.
TEST(JobSpecTest, CheckpointJobDirIsOneRule) {
  auto job = ParseJobConfig(Job(""), "job.yaml", {"checkpoint.dir=runs/ck"});
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(CheckpointJobDir(*job), "runs/ck/big");
  EXPECT_EQ(CheckpointJobDir(*job, "/work/a"), "/work/a/runs/ck/big");
  job->checkpoint.dir = "/abs/ck";
  EXPECT_EQ(CheckpointJobDir(*job, "/work/a"), "/abs/ck/big");
}

}  // namespace
}  // namespace shard

namespace shard {
namespace {

std::string SftJob(const std::string& model, const std::string& data_extra) {
  return "name: sft\nmodel: " + model + "\ndata: {jsonl: rows.jsonl, seq_len: 16" + data_extra +
         "}\ntrain: {steps: 1, global_batch: 2, micro_batch: 1}\nparallel: {world_size: 2}\n";
}

TEST(DataDefaultsTest, TokenizerAndTemplateFollowTheModel) {
  // A preset and no tokenizer: byte, but only for a model with the byte vocabulary.
  auto preset = ParseJobConfig(SftJob("{preset: tiny}", ""), "job.yaml");
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  EXPECT_EQ(preset->data.tokenizer, "byte");
  EXPECT_TRUE(preset->data.tokenizer_from_model);
  EXPECT_EQ(preset->data.chat_template, "auto");
  EXPECT_EQ(preset->data.format, SftFormat::kAuto);
  Status st = preset->data.CheckTokenizerFitsModel(512);
  EXPECT_TRUE(Contains(st.message(), "data.tokenizer is not set, so the byte tokenizer (265 ids) would feed a model "
                                     "with vocab_size 512"))
      << st.ToString();
  EXPECT_TRUE(preset->data.CheckTokenizerFitsModel(265).ok());
  auto explicit_byte = ParseJobConfig(SftJob("{preset: tiny}", ", tokenizer: byte"), "job.yaml");
  ASSERT_TRUE(explicit_byte.ok());
  EXPECT_FALSE(explicit_byte->data.tokenizer_from_model);
  EXPECT_TRUE(explicit_byte->data.CheckTokenizerFitsModel(512).ok());

  // model.from_hf: its folder's tokenizer (and with template auto, its chat_template).
  const auto dir = std::filesystem::temp_directory_path() / ("shardd_data_defaults_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "with");
  std::filesystem::create_directories(dir / "without");
  std::ofstream(dir / "with" / "tokenizer.json") << "{}";
  auto hf = ParseJobConfig(SftJob("{from_hf: " + (dir / "with").string() + "}", ""), "job.yaml");
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ(hf->data.tokenizer, (dir / "with").string());
  auto none = ParseJobConfig(SftJob("{from_hf: " + (dir / "without").string() + "}", ""), "job.yaml");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(), "holds no tokenizer.json or tokenizer.model")) << none.status().ToString();
  auto hf_byte = ParseJobConfig(SftJob("{from_hf: " + (dir / "without").string() + "}", ", tokenizer: byte"), "job.yaml");
  EXPECT_TRUE(hf_byte.ok());
  std::filesystem::remove_all(dir);

  ExpectRefused(SftJob("{preset: tiny}", ", template: vicuna"), {"data.template: 'vicuna' is not one of auto, hf, hf:NAME"});
  ExpectRefused(SftJob("{preset: tiny}", ", format: csv"), {"format"});
  EXPECT_TRUE(ParseJobConfig(SftJob("{preset: tiny}", ", template: hf:tool_use, format: sharegpt"), "job.yaml").ok());
}

// restart.* used to take 0, -1, NaN and 1e300 (a coordinator that restarts
// forever, or fails every worker at its first heartbeat).
TEST(RestartConfigTest, BoundsAreChecked) {
  const std::string base = Job("  launcher: local\n", 2);
  for (const auto& [set, key] : std::vector<std::pair<std::string, std::string>>{
           {"restart.heartbeat_timeout_s=0", "restart.heartbeat_timeout_s"},
           {"restart.heartbeat_timeout_s=-3", "restart.heartbeat_timeout_s"},
           {"restart.max_restarts=-1", "restart.max_restarts"},
           {"restart.max_restarts=100000", "restart.max_restarts"},
           {"restart.backoff_s=.nan", "restart.backoff_s"},
           {"restart.backoff_s=-1", "restart.backoff_s"},
           {"restart.backoff_s=1e300", "restart.backoff_s"},
           {"restart.hang_timeout_s=.inf", "restart.hang_timeout_s"},
           {"restart.hang_timeout_s=0", "restart.hang_timeout_s"}}) {
    auto job = ParseJobConfig(base, "job.yaml", {set});
    ASSERT_FALSE(job.ok()) << set;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(job.status().message(), "job.yaml: " + key + " must be")) << job.status().ToString();
  }
  auto ok = ParseJobConfig(base, "job.yaml",
                           {"restart.max_restarts=0", "restart.backoff_s=0", "restart.heartbeat_timeout_s=0.5"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->restart.max_restarts, 0);
}

TEST(JobNameTest, LongNamesAreRefusedEarly) {
  const std::string base = Job("  launcher: local\n", 2);
  auto at_limit = ParseJobConfig(base, "job.yaml", {"name=" + std::string(kMaxJobNameLength, 'n')});
  EXPECT_TRUE(at_limit.ok()) << at_limit.status().ToString();
  auto long_name = ParseJobConfig(base, "job.yaml", {"name=" + std::string(300, 'n')});
  ASSERT_FALSE(long_name.ok());
  EXPECT_TRUE(Contains(long_name.status().message(), "job.yaml: name: 300 characters is too long; the limit is 128"))
      << long_name.status().ToString();
  EXPECT_FALSE(ParseJobConfig(base, "job.yaml", {"name=''"}).ok());
}

TEST(JobFileTest, DuplicateSectionsAndEmptyOverridesAreRefused) {
  auto dup = ParseJobConfig(Job("  launcher: local\n", 2) + "train: {steps: 99}\n", "job.yaml");
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(Contains(dup.status().message(), "job.yaml: train: duplicate key (line 4 and line 8)"))
      << dup.status().ToString();
  auto empty = ParseJobConfig(Job("  launcher: local\n", 2), "job.yaml", {"train.steps="});
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(Contains(empty.status().message(), "job.yaml: train.steps: expected an integer, got ''"))
      << empty.status().ToString();
  for (const char* set : {"restart.backoff_s=", "parallel.activation_checkpointing="})
    EXPECT_FALSE(ParseJobConfig(Job("  launcher: local\n", 2), "job.yaml", {set}).ok()) << set;
}

// data.format, train_on, bad_rows and overlong are typed once, at load,
// through the tables shard/data and shardctl's flags read too.
TEST(DataEnumsTest, ClosedSetsAreTypedAtLoadAndRefusedWithTheirChoices) {
  auto job = ParseJobConfig(SftJob("{preset: tiny}", ", format: sharegpt, train_on: all, bad_rows: skip, overlong: drop"),
                            "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->data.format, SftFormat::kShareGpt);
  EXPECT_EQ(job->data.train_on, TrainOn::kAll);
  EXPECT_EQ(job->data.bad_rows, BadRows::kSkip);
  EXPECT_EQ(job->data.overlong, Overlong::kDrop);
  ExpectRefused(SftJob("{preset: tiny}", ", format: csv"),
                {"job.yaml", "data.format", "'csv' is not one of: auto, messages, prompt_response, alpaca, sharegpt"});
  ExpectRefused(SftJob("{preset: tiny}", ", train_on: prompt"), {"data.train_on", "assistant, all"});
  ExpectRefused(SftJob("{preset: tiny}", ", bad_rows: ignore"), {"data.bad_rows", "fail, skip"});
  ExpectRefused(SftJob("{preset: tiny}", ", overlong: wrap"), {"data.overlong", "truncate, drop"});
  for (const auto& e : kSftFormatNames) EXPECT_EQ(*ParseSftFormat(e.name), e.value);
  EXPECT_STREQ(OverlongName(Overlong::kDrop), "drop");
  EXPECT_STREQ(TrainOnName(TrainOn::kAssistant), "assistant");
}

TEST(KubernetesConfigTest, ImagePullPolicyIsTyped) {
  auto job = ParseJobConfig(Job("  launcher: kubernetes\n  kubernetes: {image: w:1, pvc: p, image_pull_policy: Never}\n",
                                2),
                            "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->resources.kubernetes.image_pull_policy, ImagePullPolicy::kNever);
  EXPECT_STREQ(ImagePullPolicyName(job->resources.kubernetes.image_pull_policy), "Never");
  ExpectRefused(Job("  launcher: kubernetes\n  kubernetes: {image: w:1, pvc: p, image_pull_policy: never}\n", 2),
                {"resources.kubernetes.image_pull_policy", "Always, IfNotPresent, Never"});
}

// optim: holds the optimizer state's storage only; a hyper-parameter written
// there is pointed to its train: key (not "unknown key (known here: )").
TEST(OptimSectionTest, HyperParametersArePointedToTrain) {
  const std::string rest = "model: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 16}\nresources: {device: cpu}\n";
  auto job = ParseJobConfig("name: o\noptim: {lr: 0.001}\n" + rest, "job.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("job.yaml: optim.lr: not an optim: key; the optimizer's hyper-parameters are "
                                        "train: keys (train.lr)"),
            std::string::npos)
      << job.status().ToString();
  auto other = ParseJobConfig("name: o\noptim: {bogus: 1}\n" + rest, "job.yaml");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("optim.bogus: unknown key (known here: state_dtype)"), std::string::npos)
      << other.status().ToString();
}

}  // namespace
}  // namespace shard

namespace shard {
namespace {

// Issue 39 item 12: what a careless job file meets, one clean line each.
TEST(JobFileInputTest, InvalidUtf8IsRefusedWithItsLine) {
  std::string yaml = Job("  device: cpu\n", 2);
  yaml += "# caf\xE9\n";  // Latin-1, not UTF-8
  ExpectRefused(yaml, {"job.yaml: not valid UTF-8", "byte 0xE9 at line 8"});
  ExpectRefused(Job("  device: cpu\n", 2) + "# \xED\xA0\x80\n", {"not valid UTF-8", "0xED"});  // a surrogate
  ExpectRefused(Job("  device: cpu\n", 2) + "# \xC0\xAF\n", {"not valid UTF-8"});               // overlong '/'
  EXPECT_TRUE(CheckUtf8("caf\xC3\xA9 \xF0\x9F\x99\x82", "x").ok());
}

TEST(JobFileInputTest, AControlCharacterInTheNameIsNamedNotEchoed) {
  std::string yaml = Job("  device: cpu\n", 2);
  yaml.replace(0, yaml.find('\n'), "name: \"a\\0b\"");
  auto job = ParseJobConfig(yaml, "job.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message().find('\0'), std::string::npos);
  EXPECT_TRUE(Contains(job.status().message(), "name: control character 0x00 at position 2"))
      << job.status().ToString();
}

TEST(JobFileInputTest, ANonRegularJobFileIsNamed) {
  auto job = LoadJobConfig("/dev/zero");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(job.status().message(), "job file /dev/zero is not a regular file")) << job.status().ToString();
}

TEST(RestartSectionTest, ElasticSizeWithoutRestartsIsRefused) {
  std::string yaml = Job("  device: cuda\n", 2) + "restart: {max_restarts: 0, min_world_size: 1}\n";
  ExpectRefused(yaml, {"restart.min_world_size 1 with restart.max_restarts 0"});
  EXPECT_TRUE(ParseJobConfig(Job("  device: cuda\n", 2) + "restart: {max_restarts: 1, min_world_size: 1}\n",
                             "job.yaml").ok());
}

TEST(RestartSectionTest, AHugeNumberIsEchoedBounded) {
  auto job = ParseJobConfig(Job("  device: cpu\n", 2) + "restart: {backoff_s: 1e300}\n", "job.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(Contains(job.status().message(), "got 1e+300")) << job.status().ToString();
  EXPECT_LT(job.status().message().size(), 200u) << job.status().ToString();
}

}  // namespace
}  // namespace shard

namespace shard {
namespace {

std::string CpJob(int c, int world, int seq_len) {
  return "name: cp\nmodel: {preset: tiny}\ndata: {tokens: data/tokens.u32, seq_len: " + std::to_string(seq_len) +
         "}\ntrain: {steps: 10, global_batch: " + std::to_string(world * 2) +
         ", micro_batch: 2}\nparallel: {world_size: " + std::to_string(world) +
         ", context_parallel: " + std::to_string(c) + "}\n";
}

// parallel.context_parallel: the shape checks name the numbers; a valid C > 1
// parses (the trainer splits the sequences), the data is split over world / C
// ranks (global_batch a multiple of micro_batch x world / C), and what is not
// built with it yet is refused in one line.
TEST(ContextParallelConfigTest, ShapeChecksAndWhatIsNotBuilt) {
  auto one = ParseJobConfig(CpJob(1, 2, 16), "job.yaml");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->parallel.context_parallel, 1);
  EXPECT_EQ(ParseJobConfig(CpJob(3, 6, 16), "job.yaml").status().message(),
            "job.yaml: parallel.context_parallel 3: seq_len 16 is not a multiple of 2 x 3 = 6 (each sequence is cut "
            "into 2C equal chunks)");
  EXPECT_EQ(ParseJobConfig(CpJob(2, 3, 16), "job.yaml").status().message(),
            "job.yaml: parallel.context_parallel 2: does not divide parallel.world_size 3");
  auto two = ParseJobConfig(CpJob(2, 4, 16), "job.yaml");
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->parallel.context_parallel, 2);
  // 4 ranks at C = 2 are 2 data ranks: global_batch 4 = 2 x 2 fits, 6 does not.
  EXPECT_TRUE(ParseJobConfig(CpJob(2, 4, 16), "job.yaml", {"train.global_batch=4"}).ok());
  EXPECT_EQ(ParseJobConfig(CpJob(2, 4, 16), "job.yaml", {"train.global_batch=6"}).status().message(),
            "job.yaml: train.global_batch 6 must be a multiple of train.micro_batch x parallel.world_size / "
            "parallel.context_parallel = 4");
  // Preference pairs split over the group (cp_train_test PreferenceStepOne...): no CP refusal (this token-stream
  // job is refused for having no replies, as at C = 1).
  const auto dpo = ParseJobConfig(CpJob(2, 4, 16), "job.yaml", {"preference.method=dpo"});
  EXPECT_EQ(dpo.status().message().find("context parallelism"), std::string::npos) << dpo.status().ToString();
  const auto dpo1 = ParseJobConfig(CpJob(1, 4, 16), "job.yaml", {"preference.method=dpo"});
  EXPECT_EQ(dpo.status().message(), dpo1.status().message());
  const auto elastic = ParseJobConfig(CpJob(2, 4, 16), "job.yaml", {"restart.min_world_size=2"});
  EXPECT_NE(elastic.status().message().find("elastic restarts (restart.min_world_size) with context parallelism are "
                                            "not built yet"),
            std::string::npos)
      << elastic.status().ToString();
}

}  // namespace
}  // namespace shard

namespace shard {
namespace {

// restart.coordinator_loss_timeout_s: read, 60 s by default, bounded like the
// other restart times.
TEST(CoordinatorLossTimeoutTest, ReadDefaultAndBounded) {
  const std::string base =
      "name: c\nmodel: {preset: tiny}\ndata: {tokens: data/tokens.u32, seq_len: 16}\n"
      "train: {steps: 10, global_batch: 4, micro_batch: 2}\nparallel: {world_size: 2}\n";
  auto plain = ParseJobConfig(base, "job.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->restart.coordinator_loss_timeout_s, 60.0);
  auto set = ParseJobConfig(base + "restart: {coordinator_loss_timeout_s: 7.5}\n", "job.yaml");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->restart.coordinator_loss_timeout_s, 7.5);
  for (const char* bad : {"0", "-1", "1e9", ".nan"}) {
    auto b = ParseJobConfig(base + "restart: {coordinator_loss_timeout_s: " + bad + "}\n", "job.yaml");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("restart.coordinator_loss_timeout_s must be a number in (0, 86400] seconds"),
              std::string::npos)
        << b.status().ToString();
  }
}

}  // namespace
}  // namespace shard
