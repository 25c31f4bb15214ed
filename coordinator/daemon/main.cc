// shardd: the coordinator daemon. Owns jobs, launches workers, watches their
// health, commits checkpoints and restarts failed attempts; state in SQLite
// under --state-dir. SIGINT/SIGTERM stop it cleanly and leave running workers
// alone: started again, it adopts them.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "coordinator/daemon/coordinator.h"
#include "shard/common/cli_conventions.h"
#include "shard/common/logging.h"

namespace {

using shard::cli::FiniteRange;

// The number flags' bounds (docs/cli.md). CPU slots are allocated per slot
// at the first submission; seconds become int64 milliseconds.
constexpr double kMaxCpuSlots = 4096;
constexpr double kMinMessageBytes = 64 << 10;
constexpr double kMaxMessageBytes = 1 << 30;
constexpr double kMaxKillGraceS = 3600;
constexpr double kMaxSeconds = 1e9;  // about 31 years: "never" in practice

// The gRPC side: where it listens, its state, TLS, the workers it launches.
void AddServerFlags(CLI::App& app, shardd::CoordinatorOptions* opts) {
  app.add_option("--state-dir", opts->state_dir, "Jobs database, admin token and job logs")->capture_default_str();
  app.add_option("--listen", opts->server.listen, "host:port to serve on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--worker-bin", opts->worker_bin, "Path of shardd-worker (default: found beside shardd)");
  app.add_option("--kubectl", opts->kubectl, "kubectl for launcher: kubernetes")->capture_default_str();
  app.add_option("--kubectl-arg", opts->kubectl_args,
                 "Put before every kubectl subcommand (repeatable): --kubectl-arg=--context=prod");
  app.add_option("--k8s-namespace", opts->k8s_namespaces,
                 "Where a restarted coordinator looks for its running Kubernetes attempts (repeatable; default: "
                 "its own pod's namespace, else default)");
  app.add_option("--worker-address", opts->worker_address,
                 "host:port workers dial (default: the --listen address; give a routable one for Slurm or "
                 "Kubernetes workers on other hosts)");
  app.add_option("--tls-cert", opts->server.tls_cert, "PEM certificate (enables TLS)");
  app.add_option("--tls-key", opts->server.tls_key, "PEM private key");
  app.add_option("--tls-client-ca", opts->server.tls_client_ca, "PEM CA that client certificates must chain to");
  app.add_option("--worker-tls-ca", opts->worker_tls_ca,
                 "PEM workers verify the coordinator with (default: --tls-cert)");
  app.add_option("--worker-tls-cert", opts->worker_tls_cert,
                 "PEM client certificate the workers shardd launches present (required with --tls-client-ca)");
  app.add_option("--worker-tls-key", opts->worker_tls_key, "PEM private key of --worker-tls-cert");
  app.add_option("--allowed-root", opts->allowed_roots,
                 "Confine every path a job names (and its workdir) to this directory (repeatable; default: no "
                 "confinement)");
  app.add_flag("--allow-insecure", opts->server.allow_insecure, "Serve a non-loopback address without TLS");
  // Every number flag is bounded (issue 28 item 13): exit 2 naming the flag
  // for NaN, infinity or a value outside the range given here.
  FiniteRange(app.add_option("--max-message-bytes", opts->server.max_message_bytes, "Largest RPC message accepted")
                  ->capture_default_str(),
              kMinMessageBytes, kMaxMessageBytes);
}

// The HTTP side: the dashboard, /metrics and /healthz.
void AddHttpFlags(CLI::App& app, shardd::CoordinatorOptions* opts) {
  opts->http_listen = "127.0.0.1:7080";
  app.add_option("--http-listen", opts->http_listen,
                 "host:port for the web dashboard (/), /metrics and /healthz (\"\" = off, port 0 = any)")
      ->capture_default_str();
  app.add_flag("--dashboard-trust-loopback", opts->dashboard_trust_loopback,
               "Let loopback clients use the dashboard, /api and /metrics without the admin token. Only on a "
               "single-user machine: every local user and any local reverse proxy connect from loopback");
  app.add_option("--dashboard-host", opts->dashboard_hosts,
                 "A Host name the HTTP side answers besides IP addresses and localhost (repeatable; e.g. the name of "
                 "a reverse proxy in front of it). Other names get 421 (DNS-rebinding guard)");
  app.add_flag("--metrics-without-token", opts->metrics_without_token,
               "Serve /metrics without the admin token (job names, states and figures to whoever reaches the port)");
  FiniteRange(app.add_option("--http-per-peer-connections", opts->http_per_peer_connections,
                             "Concurrent HTTP connections from one peer (all of 127/8 and ::1 are one); at the cap "
                             "the oldest still sending its headers is closed for a newcomer (a local reverse proxy "
                             "is one peer for all its users)")
                  ->capture_default_str(),
              1, 4096);
  FiniteRange(app.add_option("--metrics-finished-grace-s", opts->metrics_finished_grace_s,
                             "Seconds an ended job stays on /metrics (negative: forever)")
                  ->capture_default_str(),
              -kMaxSeconds, kMaxSeconds);
}

// Attempts and the local scheduler.
void AddSchedulerFlags(CLI::App& app, shardd::CoordinatorOptions* opts) {
  FiniteRange(app.add_option("--kill-grace-s", opts->kill_grace_s, "SIGTERM to SIGKILL grace for ended attempts")
                  ->capture_default_str(),
              0, kMaxKillGraceS);
  app.add_option("--gpus", opts->gpus,
                 "GPUs the local launcher may hand out: 0,1,2,3 or 0-7 or none (default: what shardd-worker --probe "
                 "reports)");
  FiniteRange(app.add_option("--cpu-slots", opts->cpu_slots,
                             "CPU slots (one per CPU rank's thread) for local jobs (default: the core count)"),
              1, kMaxCpuSlots);
  FiniteRange(app.add_option("--queue-starvation-s", opts->queue_starvation_s,
                             "Seconds a blocked queue head waits before freed resources are reserved for it")
                  ->capture_default_str(),
              0, kMaxSeconds);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardd: the shardd coordinator daemon"};
  shardd::CoordinatorOptions opts;
  shard::cli::LogFlags log;
  shard::cli::AddCommonFlags(app, "shardd", &log);
  AddServerFlags(app, &opts);
  AddHttpFlags(app, &opts);
  AddSchedulerFlags(app, &opts);
  // SHARDD_<FLAG> for each flag; not the server's own certificate flags:
  // SHARDD_TLS_CERT/KEY name the client certificate shardctl and workers present.
  shard::cli::BindEnv(app, {"--tls-cert", "--tls-key"});
  if (auto code = shard::cli::Parse(app, argc, argv, "shardd")) return *code;
  shard::InitLogging(log.level, log.format);

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // every thread inherits it; we sigwait below

  auto c = shardd::Coordinator::Start(opts);
  if (!c.ok()) {
    const bool bad_input = c.status().code() == shard::StatusCode::kInvalidArgument;
    shard::cli::PrintError("shardd", c.status(), bad_input ? shard::cli::kExitUsage : shard::cli::kExitFailure, false);
    return bad_input ? shard::cli::kExitUsage : shard::cli::kExitFailure;
  }
  std::printf("shardd: serving on %s (state %s)", (*c)->address().c_str(), opts.state_dir.c_str());
  if ((*c)->http_port() > 0) std::printf(", metrics on http port %d", (*c)->http_port());
  if ((*c)->http_port() > 0) std::printf(", dashboard %s", (*c)->dashboard_url().c_str());
  std::printf("\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  LOG_INFO("shardd: signal {}: stopping (workers keep running)", sig);
  (*c)->StopLeavingWorkers();
  return 0;
}
