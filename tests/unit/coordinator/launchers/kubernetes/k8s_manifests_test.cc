// The renderer alone: names, labels, counts, resources, env, the Secret, the
// claim, the headless Service, the pod script; and the YAML writer read back
// by yaml-cpp.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "coordinator/launchers/command.h"
#include "coordinator/launchers/kubernetes/k8s_manifests.h"
#include "coordinator/launchers/kubernetes/k8s_names.h"
#include "coordinator/launchers/kubernetes/yaml_writer.h"

namespace shardd::k8s {
namespace {

using Json = nlohmann::ordered_json;

LaunchRequest Request(int world, int nodes, int gpus) {
  LaunchRequest r;
  r.job_id = "demo-7";
  r.attempt = 3;
  r.world = world;
  r.workdir = "/shardd/jobs/demo";
  r.log_dir = "/shardd/state/jobs/demo-7/attempt_3";
  r.coordinator = "shardd.ml.svc:7070";
  r.worker_bin = "/usr/local/bin/shardd-worker";
  r.env["SHARDD_WORKER_TOKEN"] = "s3cret-token";
  r.resources.launcher = shard::Launcher::kKubernetes;
  auto& k = r.resources.kubernetes;
  k.image = "registry.example/shardd-worker:1";
  k.pvc = "shardd-data";
  k.nodes = nodes;
  k.gpus_per_node = gpus;
  return r;
}

const Json& Container(const Manifests& m) { return m.job["spec"]["template"]["spec"]["containers"][0]; }

const Json* Env(const Manifests& m, const std::string& name) {
  for (const Json& e : Container(m)["env"])
    if (e["name"] == name) return &e;
  return nullptr;
}

TEST(K8sNames, DeterministicDnsLabelsWithinLimits) {
  EXPECT_EQ(ObjectName("demo-7", 3), "shardd-demo-7-a3");
  EXPECT_EQ(ObjectName("demo-7", 3), ObjectName("demo-7", 3));
  // Changed ids get a hash, so "Demo_7" and "demo-7" never share a name.
  const std::string changed = ObjectName("Demo_7", 3);
  EXPECT_NE(changed, ObjectName("demo-7", 3));
  EXPECT_TRUE(IsDns1123Label(changed)) << changed;
  const std::string long_id(200, 'x');
  const std::string n = ObjectName(long_id + "-12", 12);
  EXPECT_LE(n.size(), kMaxObjectName);
  EXPECT_TRUE(IsDns1123Label(n)) << n;
  EXPECT_NE(n, ObjectName(long_id + "-13", 12));  // the hash tells truncated ids apart
  EXPECT_TRUE(n.ends_with("-a12")) << n;
  EXPECT_TRUE(IsLabelValue(JobLabelValue(long_id)));
  EXPECT_EQ(SelectorString("demo-7", 3), "shardd.io/attempt=3,shardd.io/job=demo-7");
  EXPECT_TRUE(IsDns1123Label(ObjectName("---", 1)));
}

TEST(K8sNames, ValidationRules) {
  EXPECT_TRUE(IsQualifiedName("nvidia.com/gpu.product"));
  EXPECT_TRUE(IsQualifiedName("team"));
  EXPECT_FALSE(IsQualifiedName("Bad_Prefix/x"));
  EXPECT_FALSE(IsQualifiedName("a/"));
  EXPECT_FALSE(IsLabelValue("-x"));
  EXPECT_FALSE(IsLabelValue(std::string(64, 'a')));
  EXPECT_TRUE(IsEnvVarName("NCCL_DEBUG"));
  EXPECT_FALSE(IsEnvVarName("1X"));
  EXPECT_FALSE(IsEnvVarName("A=B"));
}

TEST(K8sManifests, IndexedJobShape) {
  auto m = RenderManifests(Request(16, 2, 8));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->name, "shardd-demo-7-a3");
  const Json& spec = m->job["spec"];
  EXPECT_EQ(spec["completionMode"], "Indexed");
  EXPECT_EQ(spec["completions"], 2);
  EXPECT_EQ(spec["parallelism"], 2);
  EXPECT_EQ(spec["backoffLimit"], 0);
  EXPECT_FALSE(spec.contains("activeDeadlineSeconds"));
  EXPECT_EQ(spec["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"][0], 2);
  const Json& pod = spec["template"]["spec"];
  EXPECT_EQ(pod["restartPolicy"], "Never");
  EXPECT_EQ(pod["subdomain"], m->name);
  EXPECT_EQ(Container(*m)["resources"]["limits"]["nvidia.com/gpu"], "8");
  EXPECT_EQ(pod["tolerations"][0]["key"], "nvidia.com/gpu");
  EXPECT_EQ(Container(*m)["workingDir"], "/shardd/jobs/demo");
  EXPECT_EQ(Env(*m, "SHARDD_NPROC_PER_NODE")->at("value"), "8");
  EXPECT_EQ(Env(*m, "SHARDD_COORDINATOR")->at("value"), "shardd.ml.svc:7070");
  EXPECT_EQ(Env(*m, "SHARDD_LOG_DIR")->at("value"), "/shardd/state/jobs/demo-7/attempt_3");
  // The claim at mount_path, and shared memory.
  EXPECT_EQ(pod["volumes"][0]["persistentVolumeClaim"]["claimName"], "shardd-data");
  EXPECT_EQ(Container(*m)["volumeMounts"][0]["mountPath"], "/shardd");
  EXPECT_EQ(pod["volumes"][1]["emptyDir"]["medium"], "Memory");
}

TEST(K8sManifests, LabelsSelectorAndHeadlessService) {
  LaunchRequest r = Request(2, 0, 0);
  r.resources.kubernetes.labels = {{"team", "research"}};
  auto m = RenderManifests(r);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (const Json* obj : {&m->secret, &m->service, &m->job}) {
    const Json& labels = (*obj)["metadata"]["labels"];
    EXPECT_EQ(labels[kManagedByLabel], "shardd");
    EXPECT_EQ(labels[kJobLabel], "demo-7");
    EXPECT_EQ(labels[kAttemptLabel], "3");
    EXPECT_EQ(labels["team"], "research");
    EXPECT_EQ((*obj)["metadata"]["name"], m->name);
    EXPECT_EQ((*obj)["metadata"]["annotations"][kJobIdAnnotation], "demo-7");
  }
  const Json& pod_labels = m->job["spec"]["template"]["metadata"]["labels"];
  EXPECT_EQ(pod_labels[kJobLabel], "demo-7");
  EXPECT_EQ(m->service["spec"]["clusterIP"], "None");
  EXPECT_EQ(m->service["spec"]["selector"], Json({{kAttemptLabel, "3"}, {kJobLabel, "demo-7"}}));
  // CPU workers: one per pod by default, no GPU limit, no toleration.
  EXPECT_EQ(m->job["spec"]["completions"], 2);
  EXPECT_FALSE(Container(*m).contains("resources"));
  EXPECT_FALSE(m->job["spec"]["template"]["spec"].contains("tolerations"));
}

TEST(K8sManifests, TokenOnlyInTheSecretAndRedactable) {
  auto m = RenderManifests(Request(2, 0, 0));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->secret["stringData"]["token"], "s3cret-token");
  const Json* tok = Env(*m, "SHARDD_WORKER_TOKEN");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ((*tok)["valueFrom"]["secretKeyRef"]["name"], m->name);
  EXPECT_EQ((*tok)["valueFrom"]["secretKeyRef"]["key"], "token");
  EXPECT_EQ(m->job.dump().find("s3cret-token"), std::string::npos);
  EXPECT_EQ(m->service.dump().find("s3cret-token"), std::string::npos);
  ManifestOptions o;
  o.redact_token = true;
  LaunchRequest r = Request(2, 0, 0);
  auto red = RenderManifests(r, o);
  ASSERT_TRUE(red.ok());
  EXPECT_EQ(red->Yaml().find("s3cret-token"), std::string::npos);
  EXPECT_NE(red->Yaml().find(kTokenPlaceholder), std::string::npos);
}

TEST(K8sManifests, DownwardApiHostnameAndSettings) {
  LaunchRequest r = Request(4, 2, 2);
  auto& k = r.resources.kubernetes;
  k.namespace_ = "training";
  k.service_account = "shardd-worker";
  k.node_selector = {{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}};
  k.env = {{"NCCL_DEBUG", "WARN"}};
  k.active_deadline_s = 3600;
  k.cpu = "8";
  k.memory = "64Gi";
  k.coordinator = "10.0.0.5:7070";
  r.env["SHARDD_TLS_CA"] = "/shardd/tls/ca.pem";
  r.env["SHARDD_TLS_CERT"] = "/shardd/tls/worker.pem";  // mutual TLS
  r.env["SHARDD_TLS_KEY"] = "/shardd/tls/worker.key";
  auto m = RenderManifests(r);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(Env(*m, "POD_IP")->at("valueFrom")["fieldRef"]["fieldPath"], "status.podIP");
  EXPECT_EQ(Env(*m, "NCCL_DEBUG")->at("value"), "WARN");
  EXPECT_EQ(Env(*m, "SHARDD_TLS_CA")->at("value"), "/shardd/tls/ca.pem");
  EXPECT_EQ(Env(*m, "SHARDD_TLS_CERT")->at("value"), "/shardd/tls/worker.pem");
  EXPECT_EQ(Env(*m, "SHARDD_TLS_KEY")->at("value"), "/shardd/tls/worker.key");
  EXPECT_EQ(Env(*m, "SHARDD_COORDINATOR")->at("value"), "10.0.0.5:7070");
  const Json& pod = m->job["spec"]["template"]["spec"];
  EXPECT_EQ(pod["serviceAccountName"], "shardd-worker");
  EXPECT_EQ(pod["nodeSelector"]["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(m->job["spec"]["activeDeadlineSeconds"], 3600);
  EXPECT_EQ(Container(*m)["resources"]["requests"]["memory"], "64Gi");
  EXPECT_EQ(Container(*m)["resources"]["limits"]["cpu"], "8");
  for (const Json* obj : {&m->secret, &m->service, &m->job}) EXPECT_EQ((*obj)["metadata"]["namespace"], "training");
  const std::string script = Container(*m)["command"][2];
  EXPECT_NE(script.find("--hostname \"$POD_IP\""), std::string::npos);
  EXPECT_NE(script.find("--nproc-per-node \"$SHARDD_NPROC_PER_NODE\""), std::string::npos);
  EXPECT_EQ(Container(*m)["command"][0], "bash");
}

TEST(K8sManifests, RefusesWhatPodsCouldNotUse) {
  auto expect_error = [](LaunchRequest r, const std::string& words) {
    auto m = RenderManifests(r);
    ASSERT_FALSE(m.ok()) << words;
    EXPECT_EQ(m.status().code(), shard::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(words), std::string::npos) << m.status().message();
  };
  LaunchRequest r = Request(2, 0, 0);
  r.workdir = "/home/me/job";
  expect_error(r, "not under resources.kubernetes.mount_path");
  r = Request(2, 0, 0);
  r.workdir = "/shardd/../etc";
  expect_error(r, "not under resources.kubernetes.mount_path");
  r = Request(2, 0, 0);
  r.resources.kubernetes.labels = {{"bad key!", "x"}};
  expect_error(r, "resources.kubernetes.labels");
  r = Request(2, 0, 0);
  r.resources.kubernetes.env = {{"SHARDD_WORKER_TOKEN", "mine"}};
  expect_error(r, "set by shardd itself");
  r = Request(2, 0, 0);
  r.resources.kubernetes.namespace_ = "Bad_NS";
  expect_error(r, "namespace");
  r = Request(2, 0, 0);
  r.env.clear();
  expect_error(r, "SHARDD_WORKER_TOKEN");
  r = Request(3, 2, 0);
  expect_error(r, "world_size");
  r = Request(2, 0, 0);
  r.resources.kubernetes.image.clear();
  expect_error(r, "image");
}

TEST(K8sManifests, LogsOffTheClaimAreNotWritten) {
  LaunchRequest r = Request(2, 0, 0);
  r.log_dir = "/var/lib/shardd/jobs/demo-7/attempt_3";  // the coordinator's own disk
  auto m = RenderManifests(r);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(Env(*m, "SHARDD_LOG_DIR")->at("value"), "");
}

TEST(YamlWriter, ReadsBackAsTheSameValues) {
  Json doc = {{"plain", "abc"},      {"boolish", "true"},   {"numberish", "8"},     {"colon", "a: b"},
              {"empty", ""},         {"int", 5},            {"bool", false},        {"float", 1.5},
              {"multi", "l1\n  l2\n"}, {"list", Json::array({"x", Json{{"k", "v"}, {"k2", 2}}, Json::array({1, 2})})},
              {"emptyobj", Json::object()}, {"emptylist", Json::array()}, {"quote", "it's \"q\"\t"},
              {"nvidia.com/gpu", "8"}, {"inf", ".inf"}, {"tilde", "~"}, {"null", nullptr}};
  const std::string y = ToYaml(doc);
  YAML::Node n = YAML::Load(y);
  EXPECT_EQ(n["plain"].as<std::string>(), "abc");
  EXPECT_EQ(n["boolish"].Tag(), "!");  // quoted: a string, not a bool
  EXPECT_EQ(n["boolish"].as<std::string>(), "true");
  EXPECT_EQ(n["numberish"].Tag(), "!");
  EXPECT_EQ(n["colon"].as<std::string>(), "a: b");
  EXPECT_EQ(n["empty"].as<std::string>(), "");
  EXPECT_EQ(n["int"].as<int>(), 5);
  EXPECT_FALSE(n["bool"].as<bool>());
  EXPECT_EQ(n["multi"].as<std::string>(), "l1\n  l2\n");
  EXPECT_EQ(n["list"][0].as<std::string>(), "x");
  EXPECT_EQ(n["list"][1]["k2"].as<int>(), 2);
  EXPECT_EQ(n["list"][2][1].as<int>(), 2);
  EXPECT_EQ(n["emptyobj"].size(), 0u);
  EXPECT_TRUE(n["emptylist"].IsSequence());
  EXPECT_EQ(n["quote"].as<std::string>(), "it's \"q\"\t");
  EXPECT_EQ(n["nvidia.com/gpu"].as<std::string>(), "8");
  EXPECT_EQ(n["inf"].Tag(), "!");
  EXPECT_EQ(n["tilde"].as<std::string>(), "~");
  EXPECT_TRUE(n["null"].IsNull());
}

TEST(K8sManifests, YamlStreamHasThreeDocumentsSecretFirst) {
  auto m = RenderManifests(Request(2, 0, 0));
  ASSERT_TRUE(m.ok());
  std::vector<YAML::Node> docs = YAML::LoadAll(m->Yaml());
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0]["kind"].as<std::string>(), "Secret");
  EXPECT_EQ(docs[1]["kind"].as<std::string>(), "Service");
  EXPECT_EQ(docs[2]["kind"].as<std::string>(), "Job");
  EXPECT_EQ(docs[2]["spec"]["template"]["spec"]["containers"][0]["command"][2].as<std::string>(),
            PodScript("shardd-worker"));
}

// The pod's script with a stand-in worker: arguments, rank log files, exit
// code passed through.
TEST(K8sPodScript, RunsTheWorkerAndKeepsItsExitCode) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("k8s_pod_script_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "logs");
  const fs::path worker = dir / "fake-worker";
  {
    std::ofstream f(worker);
    f << "#!/bin/sh\necho \"args: $*\"\necho \"token: $SHARDD_WORKER_TOKEN\"\nexit 3\n";
  }
  fs::permissions(worker, fs::perms::owner_all);
  CommandOptions co;
  co.env = {{"JOB_COMPLETION_INDEX", "1"}, {"SHARDD_NPROC_PER_NODE", "2"}, {"SHARDD_LOG_DIR", (dir / "logs").string()},
            {"SHARDD_COORDINATOR", "c:7070"}, {"SHARDD_JOB_ID", "demo-7"}, {"SHARDD_ATTEMPT", "3"},
            {"POD_IP", "10.1.2.3"}, {"SHARDD_WORKER_TOKEN", "tok"}};
  co.timeout_s = 20;
  auto r = RunCommand({"bash", "-c", PodScript(worker.string())}, co);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 3) << r->err;
  EXPECT_NE(r->out.find("args: --coordinator c:7070 --job demo-7 --attempt 3 --nproc-per-node 2 --hostname 10.1.2.3"),
            std::string::npos)
      << r->out;
  std::ifstream log(dir / "logs" / "pod_1.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("token: tok"), std::string::npos) << text;
  // Ranks 2 and 3 live in pod 1.
  EXPECT_TRUE(fs::is_symlink(dir / "logs" / "rank_2.log"));
  EXPECT_TRUE(fs::is_symlink(dir / "logs" / "rank_3.log"));
  EXPECT_FALSE(fs::exists(dir / "logs" / "rank_1.log"));
  EXPECT_EQ(fs::read_symlink(dir / "logs" / "rank_3.log"), "pod_1.log");
  // Without JOB_COMPLETION_INDEX it refuses to run.
  co.env.erase("JOB_COMPLETION_INDEX");
  auto bad = RunCommand({"bash", "-c", PodScript(worker.string())}, co);
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->exit_code, 0);
  EXPECT_NE(bad->err.find("Indexed Job"), std::string::npos) << bad->err;
  fs::remove_all(dir);
}

// The kubelet's SIGTERM reaches the worker as SIGUSR1, its graceful stop.
TEST(K8sPodScript, TurnsSigtermIntoTheWorkersStopSignal) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("k8s_pod_term_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path worker = dir / "fake-worker";
  {
    std::ofstream f(worker);
    f << "#!/bin/bash\ntrap 'echo got-usr1; exit 5' USR1\ntrap 'echo got-term; exit 42' TERM\n"
         "touch " << ShellQuote((dir / "ready").string()) << "\nwhile :; do sleep 0.05; done\n";
  }
  fs::permissions(worker, fs::perms::owner_all);
  // The pod script in the background; SIGTERM to it, as the kubelet sends to
  // PID 1, once both sides are ready: the worker has set its traps (it
  // touched `ready`) and the pod script has set its TERM trap (bit 15 of
  // SigCgt in /proc/PID/status). A fixed nap instead lost the race on a
  // loaded machine: a SIGTERM before the trap ends bash itself (exit 143).
  const std::string outer =
      "bash -c " + ShellQuote(PodScript(worker.string())) + " & p=$!\n" +
      "until [ -e " + ShellQuote((dir / "ready").string()) +
      " ] && (( 0x$(awk '/^SigCgt/ {print $2}' /proc/$p/status) & 0x4000 )); do\n"
      "  kill -0 $p 2>/dev/null || { echo 'the pod script ended before SIGTERM'; exit 99; }\n"
      "  sleep 0.02\n"
      "done\n"
      "kill -TERM $p; wait $p";
  CommandOptions co;
  co.env = {{"JOB_COMPLETION_INDEX", "0"}, {"SHARDD_NPROC_PER_NODE", "1"}, {"SHARDD_LOG_DIR", ""}};
  co.timeout_s = 90;  // a backstop only: the script waits on events
  auto r = RunCommand({"bash", "-c", outer}, co);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 5) << r->out << r->err;
  EXPECT_NE(r->out.find("got-usr1"), std::string::npos) << r->out;
  EXPECT_EQ(r->out.find("got-term"), std::string::npos) << r->out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardd::k8s
