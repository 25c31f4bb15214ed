#include "coordinator/daemon/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <tuple>

#include "coordinator/host/probed_cluster.h"
#include "coordinator/jobs/job_paths.h"
#include "coordinator/launchers/kubernetes/kubernetes_launcher.h"
#include "coordinator/launchers/local/local_launcher.h"
#include "coordinator/launchers/slurm/slurm_launcher.h"
#include "coordinator/sched/host_capacity.h"
#include "coordinator/server/listen_check.h"
#include "coordinator/state/auth.h"
#include "coordinator/state/state_dir.h"
#include "coordinator/state/state_dir_lock.h"
#include "proto/rpc/tls_files.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"
#include "shard/config.h"

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

shard::Status CheckTlsOptions(const CoordinatorOptions& opts) {
  const ServerOptions& s = opts.server;
  RETURN_IF_ERROR(CheckCertKeyPair(s.tls_cert, s.tls_key, "--tls-cert", "--tls-key"));
  RETURN_IF_ERROR(CheckCertKeyPair(opts.worker_tls_cert, opts.worker_tls_key, "--worker-tls-cert", "--worker-tls-key"));
  const bool tls = !s.tls_cert.empty();
  if (!tls) {
    if (!s.tls_client_ca.empty()) return shard::InvalidArgument("--tls-client-ca needs --tls-cert/--tls-key");
    if (!opts.worker_tls_ca.empty()) return shard::InvalidArgument("--worker-tls-ca needs --tls-cert/--tls-key");
    if (!opts.worker_tls_cert.empty())
      return shard::InvalidArgument("--worker-tls-cert/--worker-tls-key need --tls-cert/--tls-key");
  }
  if (!s.tls_client_ca.empty() && opts.worker_tls_cert.empty())
    return shard::InvalidArgument(
        "--tls-client-ca needs --worker-tls-cert/--worker-tls-key: with mutual TLS the workers shardd launches "
        "must present a client certificate that CA signed");
  return shard::OkStatus();
}

namespace {

// One coordinator per state dir and per port, settled before anything adopts
// a worker or opens the database (read-only views take neither: they work
// beside a running daemon).
shard::StatusOr<std::unique_ptr<StateDirLock>> ClaimStateDirAndPorts(const CoordinatorOptions& opts,
                                                                      const std::string& state_dir) {
  std::string host;
  int port = 0;
  if (opts.server.listen.rfind("unix:", 0) != 0)
    RETURN_IF_ERROR(ParseHostPort(opts.server.listen, "--listen", &host, &port));
  if (!opts.http_listen.empty()) RETURN_IF_ERROR(ParseHostPort(opts.http_listen, "--http-listen", &host, &port));
  RETURN_IF_ERROR(SecureStateDir(state_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<StateDirLock> lock, StateDirLock::Acquire(state_dir));
  RETURN_IF_ERROR(CheckPortFree(opts.server.listen, "", "--listen"));
  if (!opts.http_listen.empty()) RETURN_IF_ERROR(CheckPortFree(opts.http_listen, " for HTTP", "--http-listen"));
  return lock;
}

KubernetesLauncherOptions KubernetesOptions(const CoordinatorOptions& opts) {
  KubernetesLauncherOptions ko;
  ko.kubectl = opts.kubectl;
  ko.kubectl_args = opts.kubectl_args;
  ko.adopt_namespaces = opts.k8s_namespaces;
  if (ko.adopt_namespaces.empty()) {
    auto ns = shard::ReadFileToString("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
    ko.adopt_namespaces = {ns.ok() && !ns->empty() ? *ns : std::string("default")};
  }
  return ko;
}

// The CA the launched workers verify the coordinator with, and their client
// certificate under mutual TLS.
void SetWorkerTls(const CoordinatorOptions& opts, JobManagerOptions* jo) {
  auto absolute = [](const std::string& p) { return fs::absolute(p).lexically_normal().string(); };
  if (!opts.server.tls_cert.empty())
    jo->worker_tls_ca = absolute(opts.worker_tls_ca.empty() ? opts.server.tls_cert : opts.worker_tls_ca);
  if (opts.worker_tls_cert.empty()) return;
  jo->worker_tls_cert = absolute(opts.worker_tls_cert);
  jo->worker_tls_key = absolute(opts.worker_tls_key);
  // Only the workers read these, and cluster workers may find them where
  // this host does not: a file that is bad here is a warning, not a refusal.
  for (auto [path, kind, name] : {std::tuple{jo->worker_tls_cert, kPemCertificate, "--worker-tls-cert"},
                                  std::tuple{jo->worker_tls_key, kPemPrivateKey, "--worker-tls-key"}})
    if (auto pem = ReadPem(path, kind, name); !pem.ok())
      LOG_WARN("{} (workers on this host will fail to connect; others must find the file at that path)",
               pem.status().message());
}

// The local scheduler's capacity: --gpus, or what the worker binary probes.
shard::Status SetLocalCapacity(const CoordinatorOptions& opts, JobManagerOptions* jo) {
  sched::CapacityOptions co;
  co.cpu_slots = opts.cpu_slots;
  if (!opts.gpus.empty()) {
    ASSIGN_OR_RETURN(co.gpus, sched::ParseGpuList(opts.gpus));
  } else {
    std::string why;
    co.probed_gpus = ProbedLocalGpuCount(jo->worker_bin, &why);
    if (co.probed_gpus == 0) LOG_INFO("local scheduler: no GPU ({})", why);
  }
  jo->local_capacity = sched::MakeCapacity(co);
  jo->starvation_ms = static_cast<int64_t>(opts.queue_starvation_s * 1000);
  LOG_INFO("local scheduler: {}", jo->local_capacity->Describe());
  return shard::OkStatus();
}

shard::StatusOr<JobManagerOptions> JobOptions(const CoordinatorOptions& opts, const std::string& state_dir) {
  JobManagerOptions jo;
  jo.state_dir = state_dir;
  jo.worker_bin = opts.worker_bin.empty() ? FindWorkerBinary() : opts.worker_bin;
  jo.kill_grace_s = opts.kill_grace_s;
  jo.read_only = opts.read_only;
  ASSIGN_OR_RETURN(jo.allowed_roots, CanonicalRoots(opts.allowed_roots));
  if (!jo.allowed_roots.empty()) {
    std::string roots;
    for (const std::string& r : jo.allowed_roots) roots += (roots.empty() ? "" : ", ") + r;
    LOG_INFO("job paths confined to {}", roots);
  }
  SetWorkerTls(opts, &jo);
  jo.heartbeat_interval_s = opts.heartbeat_interval_s;
  if (!opts.read_only) RETURN_IF_ERROR(SetLocalCapacity(opts, &jo));
  return jo;
}

HttpServerOptions HttpOptions(const CoordinatorOptions& opts, const std::string& admin_token) {
  HttpServerOptions ho;
  ho.listen = opts.http_listen;
  ho.allow_insecure = opts.server.allow_insecure;
  ho.admin_token = admin_token;
  ho.trust_loopback = opts.dashboard_trust_loopback;
  ho.metrics_without_token = opts.metrics_without_token;
  ho.hosts = opts.dashboard_hosts;
  ho.limits.per_peer = opts.http_per_peer_connections;
  ho.limits.max_connections = std::max(ho.limits.max_connections, ho.limits.per_peer);
  ho.finished_grace_s = opts.metrics_finished_grace_s;
  ho.version = SHARDD_VERSION;
  return ho;
}

}  // namespace

shard::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& opts) {
  RETURN_IF_ERROR(CheckTlsOptions(opts));
  std::unique_ptr<Coordinator> c(new Coordinator());
  const std::string state_dir = fs::absolute(opts.state_dir).lexically_normal().string();
  if (!opts.read_only) {
    ASSIGN_OR_RETURN(c->lock_, ClaimStateDirAndPorts(opts, state_dir));
  }
  ASSIGN_OR_RETURN(c->store_, StateStore::Open(state_dir));
  ASSIGN_OR_RETURN(c->token_, LoadOrCreateAdminToken(state_dir));
  ASSIGN_OR_RETURN(JobManagerOptions jo, JobOptions(opts, state_dir));
  // Which of a job's GPUs are left at a restart: the devices at start (PCI
  // ids by ordinal) against a fresh probe, at most every 10 s.
  const std::string worker_bin = jo.worker_bin;
  auto local = std::make_unique<LocalLauncher>(std::make_unique<LocalGpuWatch>(
      opts.read_only ? shard::StatusOr<std::vector<std::string>>(shard::Unavailable("read-only: launches nothing"))
                     : ProbedLocalGpuIds(worker_bin, /*fresh=*/false), [worker_bin] { return ProbedLocalGpuIds(worker_bin, true); },
      [] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now().time_since_epoch())
            .count();
      }));
  c->local_ = local.get();
  c->launcher_ = std::move(local);
  c->slurm_ = std::make_unique<SlurmLauncher>();
  c->kubernetes_ = std::make_unique<KubernetesLauncher>(KubernetesOptions(opts));
  c->jobs_ = std::make_unique<JobManager>(jo, c->store_.get(), c->launcher_.get());
  c->jobs_->AddLauncher(c->slurm_.get());
  c->jobs_->AddLauncher(c->kubernetes_.get());
  // Jobs, adopted attempts and their placements are back before any RPC can
  // submit (a job number already used) or a Tick can place (devices an
  // adopted attempt still runs on).
  RETURN_IF_ERROR(c->jobs_->Recover());
  ASSIGN_OR_RETURN(c->server_, CoordinatorServer::Start(opts.server, c->jobs_.get(), c->token_));
  // Workers dial the address we listen on, with the port actually bound.
  std::string host = opts.server.listen.substr(0, opts.server.listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  c->address_ = host + ":" + std::to_string(c->server_->port());
  c->jobs_->set_coordinator_address(opts.worker_address.empty() ? c->address_ : opts.worker_address);
  if (!opts.http_listen.empty() && !opts.read_only) {
    ASSIGN_OR_RETURN(c->http_, HttpServer::Start(HttpOptions(opts, c->token_), c->jobs_.get()));
    c->http_listen_ = opts.http_listen;
  }
  if (c->lock_) RETURN_IF_ERROR(c->lock_->Record(c->address_));
  if (!opts.read_only) {
    c->jobs_->Start();
    c->reports_ = std::make_unique<ReportWriter>(c->jobs_.get());
    c->reports_->Start();
  }
  return c;
}

Coordinator::~Coordinator() { Stop(); }

std::string Coordinator::dashboard_url() const {
  if (!http_) return "";
  std::string host = http_listen_.substr(0, http_listen_.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return "http://" + host + ":" + std::to_string(http_->port()) + "/";
}

shard::StatusOr<std::string> Coordinator::dashboard_login_url(std::chrono::seconds ttl) const {
  if (!http_) return std::string();
  ASSIGN_OR_RETURN(std::string path, http_->IssueLoginPath(ttl));
  return dashboard_url() + path.substr(1);
}

void Coordinator::Stop() {
  if (reports_) {
    reports_->Flush();
    reports_.reset();
  }
  if (http_) http_->Stop();
  // The control loop first: while the server shuts down, no exit is read,
  // no deadline applied and no restart charged (workers keep training; a
  // coordinator started again on this state dir adopts them).
  if (jobs_) jobs_->Stop();
  if (server_) server_->Shutdown();
}

void Coordinator::StopLeavingWorkers() {
  Stop();
  if (local_) local_->Release();
}

}  // namespace shardd
