#include "coordinator/launchers/kubernetes/k8s_manifests.h"

#include <filesystem>
#include <set>

#include "coordinator/launchers/command.h"
#include "coordinator/launchers/kubernetes/k8s_names.h"
#include "coordinator/launchers/kubernetes/yaml_writer.h"

namespace shardd::k8s {

namespace {

using Json = nlohmann::ordered_json;
using shard::InvalidArgument;
using shard::Status;

// Set by the launcher (or by Kubernetes for JOB_COMPLETION_INDEX): a job
// file's env must not replace them.
const std::set<std::string> kReserved = {
    "POD_IP", "JOB_COMPLETION_INDEX", "SHARDD_COORDINATOR", "SHARDD_WORKER_TOKEN", "SHARDD_JOB_ID",
    "SHARDD_ATTEMPT", "SHARDD_NPROC_PER_NODE", "SHARDD_LOG_DIR"};

// `dir` is `root` or below it (lexically: both are absolute and normalized).
bool Under(const std::string& dir, const std::string& root) {
  namespace fs = std::filesystem;
  const fs::path d = fs::path(dir).lexically_normal(), r = fs::path(root).lexically_normal();
  auto rel = d.lexically_relative(r);
  return d.is_absolute() && !rel.empty() && *rel.begin() != "..";
}

Status CheckLabels(const std::map<std::string, std::string>& m, const std::string& key) {
  for (const auto& [k, v] : m) {
    if (!IsQualifiedName(k))
      return InvalidArgument("resources.kubernetes." + key + ": '" + k +
                             "' is not a valid label key ([prefix/]name, name <= 63 of [A-Za-z0-9._-])");
    if (!IsLabelValue(v))
      return InvalidArgument("resources.kubernetes." + key + "." + k + ": '" + v +
                             "' is not a valid label value (<= 63 of [A-Za-z0-9._-], alphanumeric at both ends)");
  }
  return shard::OkStatus();
}

bool IsSubdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t dot = s.find('.', start);
    if (dot == std::string::npos) dot = s.size();
    if (!IsDns1123Label(s.substr(start, dot - start))) return false;
    start = dot + 1;
  }
  return true;
}

Status CheckRequest(const LaunchRequest& req, bool redact_token) {
  const shard::KubernetesConfig& c = req.resources.kubernetes;
  if (Status st = c.Validate(req.world); !st.ok()) return st;
  if (!IsDns1123Label(c.namespace_))
    return InvalidArgument("resources.kubernetes.namespace '" + c.namespace_ + "' is not a DNS-1123 label");
  if (!IsSubdomain(c.pvc))
    return InvalidArgument("resources.kubernetes.pvc '" + c.pvc + "' is not a valid claim name (DNS-1123 subdomain)");
  if (!c.service_account.empty() && !IsSubdomain(c.service_account))
    return InvalidArgument("resources.kubernetes.service_account '" + c.service_account +
                           "' is not a valid name (DNS-1123 subdomain)");
  if (Status st = CheckLabels(c.labels, "labels"); !st.ok()) return st;
  if (Status st = CheckLabels(c.node_selector, "node_selector"); !st.ok()) return st;
  for (const auto& [k, v] : c.labels)
    if (k == kManagedByLabel || k == kJobLabel || k == kAttemptLabel)
      return InvalidArgument("resources.kubernetes.labels." + k + " is set by shardd itself");
  for (const auto& [k, v] : c.env) {
    if (!IsEnvVarName(k)) return InvalidArgument("resources.kubernetes.env: '" + k + "' is not a valid variable name");
    if (kReserved.count(k)) return InvalidArgument("resources.kubernetes.env." + k + " is set by shardd itself");
  }
  if (!Under(req.workdir, c.mount_path) && req.workdir != c.mount_path)
    return InvalidArgument("the job's directory " + req.workdir + " is not under resources.kubernetes.mount_path " +
                           c.mount_path + ": pods only see the claim '" + c.pvc +
                           "' there; submit the job from a directory on the claim");
  const std::string coordinator = c.coordinator.empty() ? req.coordinator : c.coordinator;
  if (coordinator.empty())
    return InvalidArgument("no coordinator address for the pods: set resources.kubernetes.coordinator or start shardd "
                           "with --worker-address");
  if (!redact_token && req.env.count("SHARDD_WORKER_TOKEN") == 0)
    return InvalidArgument("launch request for job " + req.job_id + " carries no SHARDD_WORKER_TOKEN");
  return shard::OkStatus();
}

Json Metadata(const std::string& name, const std::string& ns, const Json& labels, const std::string& job_id) {
  return Json{{"name", name}, {"namespace", ns}, {"labels", labels},
              {"annotations", Json{{kJobIdAnnotation, job_id}}}};
}

Json EnvVar(const std::string& name, const std::string& value) { return Json{{"name", name}, {"value", value}}; }

// The worker's environment: where it is (POD_IP), whom it reports to, its
// token (from the Secret named `name`), its job, attempt and ranks per pod,
// where it logs (only on the claim), then the request's and the job file's own.
Json ContainerEnv(const LaunchRequest& req, const std::string& name) {
  const shard::KubernetesConfig& c = req.resources.kubernetes;
  const std::string coordinator = c.coordinator.empty() ? req.coordinator : c.coordinator;
  const bool logs_on_claim = Under(req.log_dir, c.mount_path);
  Json env = Json::array();
  env.push_back(Json{{"name", "POD_IP"}, {"valueFrom", Json{{"fieldRef", Json{{"fieldPath", "status.podIP"}}}}}});
  env.push_back(EnvVar("SHARDD_COORDINATOR", coordinator));
  env.push_back(Json{{"name", "SHARDD_WORKER_TOKEN"},
                     {"valueFrom", Json{{"secretKeyRef", Json{{"name", name}, {"key", kTokenKey}}}}}});
  env.push_back(EnvVar("SHARDD_JOB_ID", req.job_id));
  env.push_back(EnvVar("SHARDD_ATTEMPT", std::to_string(req.attempt)));
  env.push_back(EnvVar("SHARDD_NPROC_PER_NODE", std::to_string(c.ProcsPerNode(req.world))));
  env.push_back(EnvVar("SHARDD_LOG_DIR", logs_on_claim ? req.log_dir : ""));
  for (const auto& [k, v] : req.env)
    if (k != "SHARDD_WORKER_TOKEN" && !kReserved.count(k)) env.push_back(EnvVar(k, v));
  for (const auto& [k, v] : c.env)
    if (!req.env.count(k)) env.push_back(EnvVar(k, v));
  return env;
}

// The worker container: the pod script under bash, the job's directory, its
// environment, GPU/CPU/memory requests and limits, the claim and /dev/shm.
Json Container(const LaunchRequest& req, const std::string& name, const ManifestOptions& opts) {
  const shard::KubernetesConfig& c = req.resources.kubernetes;
  Json limits = Json::object(), requests = Json::object();
  if (c.gpus_per_node > 0) limits["nvidia.com/gpu"] = std::to_string(c.gpus_per_node);
  if (!c.cpu.empty()) limits["cpu"] = requests["cpu"] = c.cpu;
  if (!c.memory.empty()) limits["memory"] = requests["memory"] = c.memory;
  Json resources = Json::object();
  if (!requests.empty()) resources["requests"] = requests;
  if (!limits.empty()) resources["limits"] = limits;

  Json container = Json{{"name", kContainerName},
                        {"image", c.image},
                        {"imagePullPolicy", ImagePullPolicyName(c.image_pull_policy)},
                        {"command", Json::array({"bash", "-c", PodScript(opts.worker_command)})},
                        {"workingDir", req.workdir},
                        {"env", ContainerEnv(req, name)}};
  if (!resources.empty()) container["resources"] = resources;
  // /dev/shm: the container default (64 MiB) is too small for NCCL and for
  // the data loader's shared buffers.
  container["volumeMounts"] = Json::array({Json{{"name", "shared"}, {"mountPath", c.mount_path}},
                                           Json{{"name", "dshm"}, {"mountPath", "/dev/shm"}}});
  return container;
}

// Kubernetes never restarts anything: a failed pod fails the Job at once
// (backoffLimit 0, restartPolicy Never) and the coordinator starts the next
// attempt from the newest committed checkpoint.
Json PodSpec(const shard::KubernetesConfig& c, const std::string& name, const Json& container) {
  Json pod_spec = Json{{"restartPolicy", "Never"}, {"subdomain", name}, {"enableServiceLinks", false}};
  // Time for the checkpoint a SIGTERM asks for, before the kubelet's SIGKILL.
  pod_spec["terminationGracePeriodSeconds"] = c.termination_grace_s;
  if (!c.service_account.empty()) pod_spec["serviceAccountName"] = c.service_account;
  if (!c.node_selector.empty()) {
    Json ns = Json::object();
    for (const auto& [k, v] : c.node_selector) ns[k] = v;
    pod_spec["nodeSelector"] = ns;
  }
  if (c.gpus_per_node > 0)
    pod_spec["tolerations"] =
        Json::array({Json{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}});
  pod_spec["containers"] = Json::array({container});
  pod_spec["volumes"] =
      Json::array({Json{{"name", "shared"}, {"persistentVolumeClaim", Json{{"claimName", c.pvc}}}},
                   Json{{"name", "dshm"}, {"emptyDir", Json{{"medium", "Memory"}}}}});
  return pod_spec;
}

}  // namespace

std::string PodScript(const std::string& worker_command) {
  // bash is PID 1: it turns SIGTERM (pod deletion, eviction) into SIGUSR1 for
  // the worker — shardd-worker's graceful stop: every rank checkpoints the
  // same step and exits 5 (with --nproc-per-node the parent passes it on to
  // its children) — and exits with the worker's code, which Kubernetes
  // reports; the kubelet's SIGKILL after the grace period ends anything left.
  // tee is started by bash itself, outside the worker's group, so the
  // worker's last words reach the log; bash waits for it before exiting.
  return "set -m\n"
         "index=\"${JOB_COMPLETION_INDEX:?not set: this pod is not part of an Indexed Job}\"\n"
         "log=/dev/null\n"
         "if [ -n \"${SHARDD_LOG_DIR:-}\" ]; then\n"
         "  mkdir -p \"$SHARDD_LOG_DIR\"\n"
         "  log=\"$SHARDD_LOG_DIR/pod_${index}.log\"\n"
         "  for ((i = 0; i < SHARDD_NPROC_PER_NODE; i++)); do\n"
         "    ln -sfn \"pod_${index}.log\" \"$SHARDD_LOG_DIR/rank_$((index * SHARDD_NPROC_PER_NODE + i)).log\"\n"
         "  done\n"
         "fi\n"
         "exec > >(tee -a \"$log\") 2>&1\n"
         "tee_pid=$!\n" +
         ShellQuote(worker_command) +
         " --coordinator \"$SHARDD_COORDINATOR\" --job \"$SHARDD_JOB_ID\" --attempt \"$SHARDD_ATTEMPT\""
         " --nproc-per-node \"$SHARDD_NPROC_PER_NODE\" --hostname \"$POD_IP\" &\n"
         "worker=$!\n"
         "trap 'kill -USR1 \"$worker\" 2>/dev/null' TERM INT\n"
         "while :; do\n"
         "  wait \"$worker\"\n"
         "  rc=$?\n"
         "  kill -0 \"$worker\" 2>/dev/null || break\n"
         "done\n"
         "wait \"$worker\" 2>/dev/null\n"
         "last=$?\n"
         "if [ \"$last\" -ne 127 ]; then rc=$last; fi\n"
         "exec >&- 2>&-\n"
         "wait \"$tee_pid\" 2>/dev/null\n"
         "exit \"$rc\"\n";
}

std::string Manifests::Yaml() const { return ToYaml(secret) + "---\n" + ToYaml(service) + "---\n" + ToYaml(job); }

shard::StatusOr<Manifests> RenderManifests(const LaunchRequest& req, const ManifestOptions& opts) {
  if (Status st = CheckRequest(req, opts.redact_token); !st.ok())
    return st.WithContext("kubernetes manifests for job " + req.job_id + " attempt " + std::to_string(req.attempt));
  const shard::KubernetesConfig& c = req.resources.kubernetes;
  const int nodes = c.Nodes(req.world);
  Manifests m;
  m.name = ObjectName(req.job_id, req.attempt);
  m.namespace_ = c.namespace_;

  Json labels = Json::object();
  for (const auto& [k, v] : c.labels) labels[k] = v;
  labels[kManagedByLabel] = kManagedByValue;
  Json selector = Json::object();
  for (const auto& [k, v] : SelectorLabels(req.job_id, req.attempt)) selector[k] = labels[k] = v;

  const std::string token =
      opts.redact_token ? std::string(kTokenPlaceholder) : req.env.at("SHARDD_WORKER_TOKEN");
  m.secret = Json{{"apiVersion", "v1"},
                  {"kind", "Secret"},
                  {"metadata", Metadata(m.name, m.namespace_, labels, req.job_id)},
                  {"type", "Opaque"},
                  {"stringData", Json{{kTokenKey, token}}}};

  // Headless: no cluster IP, just DNS records <job>-<index>.<service> for the
  // pods (through subdomain below), ready or not, for peers that want names.
  m.service = Json{{"apiVersion", "v1"},
                   {"kind", "Service"},
                   {"metadata", Metadata(m.name, m.namespace_, labels, req.job_id)},
                   {"spec", Json{{"clusterIP", "None"}, {"publishNotReadyAddresses", true}, {"selector", selector}}}};

  Json job_spec = Json{{"completionMode", "Indexed"},
                       {"completions", nodes},
                       {"parallelism", nodes},
                       {"backoffLimit", 0}};
  if (c.active_deadline_s > 0) job_spec["activeDeadlineSeconds"] = c.active_deadline_s;
  // Exit code 2 is the worker's "bad input": name it in the Job's condition
  // (reason PodFailurePolicy) so `kubectl describe` says why.
  job_spec["podFailurePolicy"] = Json{
      {"rules", Json::array({Json{{"action", "FailJob"},
                                  {"onExitCodes", Json{{"containerName", kContainerName},
                                                       {"operator", "In"},
                                                       {"values", Json::array({2})}}}}})}};
  job_spec["template"] =
      Json{{"metadata", Json{{"labels", labels}}}, {"spec", PodSpec(c, m.name, Container(req, m.name, opts))}};
  m.job = Json{{"apiVersion", "batch/v1"},
               {"kind", "Job"},
               {"metadata", Metadata(m.name, m.namespace_, labels, req.job_id)},
               {"spec", job_spec}};
  return m;
}

}  // namespace shardd::k8s
