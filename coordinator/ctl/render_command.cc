#include "coordinator/ctl/render_command.h"

#include <cstdio>
#include <filesystem>

#include "coordinator/launchers/kubernetes/k8s_manifests.h"
#include "shard/spec/job_config.h"

namespace shardctl {

namespace fs = std::filesystem;

shard::Status RunRender(const RenderOptions& o) {
  if (o.target != "k8s") return shard::InvalidArgument("render: unknown target '" + o.target + "' (known: k8s)");
  ASSIGN_OR_RETURN(shard::JobConfig job, shard::LoadJobConfig(o.job_file, o.sets));
  RETURN_IF_ERROR(job.Validate());
  const shard::KubernetesConfig& k = job.resources.kubernetes;
  if (o.attempt < 1) return shard::InvalidArgument("render: --attempt must be at least 1");

  shardd::LaunchRequest req;
  req.job_id = o.job_id.empty() ? job.name + "-1" : o.job_id;
  req.attempt = o.attempt;
  req.world = job.parallel.world_size;
  req.job_name = job.name;
  req.resources = job.resources;
  req.coordinator = o.coordinator.empty() ? "shardd:7070" : o.coordinator;
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  const fs::path mount = fs::path(k.mount_path).lexically_normal();
  const auto rel = cwd.lexically_relative(mount);
  const bool cwd_on_claim = !ec && !rel.empty() && *rel.begin() != "..";
  req.workdir = !o.workdir.empty() ? o.workdir : cwd_on_claim ? cwd.string() : mount.string();
  const fs::path state = o.state_dir.empty() ? mount / "state" : fs::path(o.state_dir);
  // Where JobManager::AttemptDir puts an attempt's rank logs.
  req.log_dir = (state / "jobs" / req.job_id / ("attempt_" + std::to_string(o.attempt))).string();
  req.worker_bin = o.worker_command;

  shardd::k8s::ManifestOptions mo;
  mo.redact_token = true;
  mo.worker_command = o.worker_command;
  ASSIGN_OR_RETURN(shardd::k8s::Manifests m, shardd::k8s::RenderManifests(req, mo));
  std::printf("# shardd: the Kubernetes objects of job %s attempt %d, as the coordinator's kubernetes launcher\n"
              "# applies them (kubectl apply --server-side -f -).\n"
              "# The Secret's token is a placeholder (%s):\n"
              "# the coordinator puts a fresh worker token there for every attempt.\n",
              req.job_id.c_str(), req.attempt, shardd::k8s::kTokenPlaceholder);
  if (job.resources.launcher != shard::Launcher::kKubernetes)
    std::printf("# Note: this job file has resources.launcher '%s', so a coordinator would not use these objects.\n",
                shard::LauncherName(job.resources.launcher));
  std::printf("---\n%s", m.Yaml().c_str());
  return shard::OkStatus();
}

}  // namespace shardctl
