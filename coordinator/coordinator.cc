#include "coordinator/coordinator.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "coordinator/auth.h"
#include "coordinator/job_paths.h"
#include "coordinator/launchers/kubernetes/kubernetes_launcher.h"
#include "coordinator/launchers/local/local_launcher.h"
#include "coordinator/launchers/slurm/slurm_launcher.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"

namespace fs = std::filesystem;

namespace shardd {

std::string FindWorkerBinary() {
  if (const char* env = std::getenv("SHARDD_WORKER_BIN"); env && *env) return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const char* rel : {"shardd-worker", "../worker/shardd-worker", "../../worker/shardd-worker"}) {
      fs::path p = (self.parent_path() / rel).lexically_normal();
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  if (const char* path = std::getenv("PATH")) {
    std::string all = path;
    size_t start = 0;
    while (start <= all.size()) {
      size_t end = all.find(':', start);
      if (end == std::string::npos) end = all.size();
      fs::path p = fs::path(all.substr(start, end - start)) / "shardd-worker";
      if (::access(p.c_str(), X_OK) == 0) return p.string();
      start = end + 1;
    }
  }
  return "shardd-worker";
}

shard::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& opts) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  const std::string state_dir = fs::absolute(opts.state_dir).lexically_normal().string();
  ASSIGN_OR_RETURN(c->store_, StateStore::Open(state_dir));
  ASSIGN_OR_RETURN(c->token_, LoadOrCreateAdminToken(state_dir));
  c->launcher_ = std::make_unique<LocalLauncher>();
  c->slurm_ = std::make_unique<SlurmLauncher>();
  KubernetesLauncherOptions ko;
  ko.kubectl = opts.kubectl;
  ko.kubectl_args = opts.kubectl_args;
  ko.adopt_namespaces = opts.k8s_namespaces;
  if (ko.adopt_namespaces.empty()) {
    auto ns = shard::ReadFileToString("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
    ko.adopt_namespaces = {ns.ok() && !ns->empty() ? *ns : std::string("default")};
  }
  c->kubernetes_ = std::make_unique<KubernetesLauncher>(ko);
  JobManagerOptions jo;
  jo.state_dir = state_dir;
  jo.worker_bin = opts.worker_bin.empty() ? FindWorkerBinary() : opts.worker_bin;
  jo.kill_grace_s = opts.kill_grace_s;
  ASSIGN_OR_RETURN(jo.allowed_roots, CanonicalRoots(opts.allowed_roots));
  if (!jo.allowed_roots.empty()) {
    std::string roots;
    for (const std::string& r : jo.allowed_roots) roots += (roots.empty() ? "" : ", ") + r;
    LOG_INFO("job paths confined to {}", roots);
  }
  if (!opts.server.tls_cert.empty()) {
    const std::string ca = opts.worker_tls_ca.empty() ? opts.server.tls_cert : opts.worker_tls_ca;
    jo.worker_tls_ca = fs::absolute(ca).lexically_normal().string();
  }
  if (!opts.server.tls_client_ca.empty())
    return shard::Unimplemented("--tls-client-ca (mutual TLS) needs client certificates for workers too, which the "
                                "local launcher does not hand out yet; use server TLS (--tls-cert/--tls-key)");
  jo.heartbeat_interval_s = opts.heartbeat_interval_s;
  c->jobs_ = std::make_unique<JobManager>(jo, c->store_.get(), c->launcher_.get());
  c->jobs_->AddLauncher(c->slurm_.get());
  c->jobs_->AddLauncher(c->kubernetes_.get());
  ASSIGN_OR_RETURN(c->server_, CoordinatorServer::Start(opts.server, c->jobs_.get(), c->token_));
  // Workers dial the address we listen on, with the port actually bound.
  std::string host = opts.server.listen.substr(0, opts.server.listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  c->address_ = host + ":" + std::to_string(c->server_->port());
  c->jobs_->set_coordinator_address(opts.worker_address.empty() ? c->address_ : opts.worker_address);
  if (!opts.http_listen.empty()) {
    ASSIGN_OR_RETURN(c->http_, HttpServer::Start(opts.http_listen, opts.server.allow_insecure, c->jobs_.get()));
  }
  RETURN_IF_ERROR(c->jobs_->Recover());
  c->jobs_->Start();
  return c;
}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Stop() {
  if (http_) http_->Stop();
  if (server_) server_->Shutdown();
  if (jobs_) jobs_->Stop();
}

}  // namespace shardd
