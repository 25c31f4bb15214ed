// A whole coordinator in one object: state store, local launcher, job manager
// and gRPC server. The shardd daemon runs one; `shardctl run` embeds one when
// no coordinator answers; tests start one on a free port.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/jobs/job_manager.h"
#include "coordinator/launchers/launcher.h"
#include "coordinator/launchers/local/local_launcher.h"
#include "coordinator/report/report_writer.h"
#include "coordinator/server/coordinator_server.h"
#include "coordinator/server/http_server.h"
#include "coordinator/state/state_dir_lock.h"
#include "coordinator/state/state_store.h"

namespace shardd {

struct CoordinatorOptions {
  std::string state_dir = ".shardd";
  ServerOptions server;
  std::string worker_bin;  // "": FindWorkerBinary()
  // With TLS, the PEM workers verify the coordinator with (default: the
  // server certificate itself, right for a self-signed one).
  std::string worker_tls_ca;
  // The client certificate and key the workers it launches present; both or
  // neither, and required with server.tls_client_ca (mutual TLS). Workers read
  // them at these paths (made absolute), so cluster workers need them mounted there.
  std::string worker_tls_cert;
  std::string worker_tls_key;
  double kill_grace_s = 5;
  double heartbeat_interval_s = 1;
  // Directories every path a job names must lie in (--allowed-root; empty =
  // anywhere the coordinator's user may reach). See coordinator/jobs/job_paths.h.
  std::vector<std::string> allowed_roots;
  std::string http_listen;  // host:port for the dashboard, /healthz and /metrics ("" = none; port 0 = any)
  double metrics_finished_grace_s = 300;  // ended jobs leave /metrics this long after they end
  // The HTTP side's access rules (coordinator/server/dashboard_access.h):
  // loopback peers without the token (--dashboard-trust-loopback), /metrics
  // without it (--metrics-without-token), Host names besides IP literals and
  // localhost (--dashboard-host), connections per peer IP (--http-per-peer-connections).
  bool dashboard_trust_loopback = false;
  bool metrics_without_token = false;
  std::vector<std::string> dashboard_hosts;
  int http_per_peer_connections = 16;
  // A read-only view of state_dir for shardctl when no coordinator runs
  // (JobManagerOptions::read_only): nothing launches or changes, no HTTP.
  bool read_only = false;
  // The address workers dial ("" = the listen address with its bound port;
  // 0.0.0.0 becomes 127.0.0.1). Cluster launchers need a routable one.
  std::string worker_address;
  // The Kubernetes launcher: kubectl and the arguments put before every
  // subcommand (--kubeconfig, --context), and the namespaces where a restarted
  // coordinator looks for its running attempts (default: its own pod's
  // namespace, else "default").
  std::string kubectl = "kubectl";
  std::vector<std::string> kubectl_args;
  std::vector<std::string> k8s_namespaces;
  // The local launcher's share of this host (docs/scheduling.md): --gpus
  // ("" = what the worker's probe reports, "none" = no GPU), --cpu-slots
  // (<= 0: the core count), and how long a blocked queue head waits before
  // freed resources are reserved for it.
  std::string gpus;
  int cpu_slots = 0;
  double queue_starvation_s = 600;
};

// Pure: the TLS flags fit together (cert with key, mutual TLS only over TLS
// and with a certificate for the workers); errors name the flags.
shard::Status CheckTlsOptions(const CoordinatorOptions& opts);

// SHARDD_WORKER_BIN, else shardd-worker beside this executable (or in the
// build tree's worker/ folder), else on PATH.
std::string FindWorkerBinary();

class Coordinator {
 public:
  static shard::StatusOr<std::unique_ptr<Coordinator>> Start(const CoordinatorOptions& opts);
  ~Coordinator();

  JobManager* jobs() { return jobs_.get(); }
  const std::string& admin_token() const { return token_; }
  // host:port clients and workers dial (the bound port when listen said :0).
  const std::string& address() const { return address_; }
  // The /metrics port (0 when HTTP is off).
  int http_port() const { return http_ ? http_->port() : 0; }
  // http://host:port/ of the dashboard ("" when HTTP is off).
  std::string dashboard_url() const;
  // dashboard_url() as a one-time login link valid for ttl ("" when HTTP is off).
  shard::StatusOr<std::string> dashboard_login_url(std::chrono::seconds ttl) const;
  // Stops serving (after writing the run reports of jobs that ended) and
  // watching: no exit is read and no restart charged from here on. Running
  // workers are left alone while this object lives; its destruction kills
  // the local launcher's (`shardctl run` takes its job down with it).
  void Stop();
  // shardd on SIGTERM/SIGINT: Stop(), then the local launcher lets its
  // workers go. They train on, retrying the coordinator, and one started
  // again on the same state dir adopts them (docs/control-plane.md).
  void StopLeavingWorkers();

 private:
  Coordinator() = default;
  std::unique_ptr<StateDirLock> lock_;  // first member: released last, after everything else stopped
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<Launcher> launcher_;  // local
  LocalLauncher* local_ = nullptr;      // launcher_, as what it is
  std::unique_ptr<Launcher> slurm_;
  std::unique_ptr<Launcher> kubernetes_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<ReportWriter> reports_;  // not in read-only views
  std::string http_listen_;
  std::string token_;
  std::string address_;
};

}  // namespace shardd
