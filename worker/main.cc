// shardd-worker: one training process. Launched by the coordinator it runs
// the agent (--coordinator ADDR --job ID --attempt N, the rank from --rank or
// the launcher's environment, token in SHARDD_WORKER_TOKEN); without --attempt
// it joins an external job's current attempt with the job's join token. With
// --standalone it trains a job file by itself (like torchrun, for debugging or
// a user's own launcher). --nproc-per-node P starts P workers in this host (a
// Kubernetes pod) and waits for them.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <functional>
#include <vector>

#include "shard/backend/hardware_probe.h"
#include "shard/common/kv_stores.h"
#include "shard/common/cli_conventions.h"
#include "shard/common/logging.h"
#include "shard/common/supervisor.h"
#include "shard/plan/hardware.h"
#include "worker/agent.h"
#include "worker/run_trainer.h"
#include "worker/stop_signal.h"
#include "worker/worker_env.h"

namespace {

int Fail(const shard::Status& st, int code = 1) {
  std::fprintf(stderr, "shardd-worker: %s\n", st.ToString().c_str());
  return code;
}

// The probe as the planner reads it (shard/plan/hardware.h): what the
// coordinator asks its worker binary for instead of loading CUDA itself.
std::string ProbedGpusJson(const shard::HardwareProbe& hw) {
  std::vector<shard::plan::ProbedGpu> gpus;
  for (const shard::GpuInfo& g : hw.gpus) {
    shard::plan::ProbedGpu p;
    p.name = g.name;
    p.memory_gib = static_cast<double>(g.total_bytes) / (1024.0 * 1024.0 * 1024.0);
    for (const shard::PeerLink& l : hw.links)
      if (l.a == g.index && l.kind == "nvlink") p.nvlink_to_peers = true;
    gpus.push_back(p);
  }
  return shard::plan::ProbedGpusToJson(gpus);
}

// Appends this process's stdout and stderr to DIR/rank_<r>.log.
shard::Status RedirectLogs(const std::string& dir, int rank) {
  const std::string path = dir + "/rank_" + std::to_string(rank) + ".log";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return shard::NotFound("--log-dir: cannot open " + path + ": " + std::strerror(errno));
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  ::close(fd);
  return shard::OkStatus();
}

// Folds one child's exit into the exit code to use: the first bad-input
// code, else the first non-zero, else 0.
void FoldExit(const shard::ExitStatus& e, int* code) {
  const int c = e.signal == 0 ? e.code : 128 + e.signal;
  if (c == shardd::kExitBadInput) *code = c;
  else if (*code == 0) *code = c;
}

// --nproc-per-node: runs this binary again once per local index (with
// --local-index i added to `args`) and waits for them (shard::Supervisor).
// Each child dies with this process, so a SIGKILLed pod entrypoint leaves no
// rank behind. SIGUSR1 and SIGTERM (a pod being stopped or evicted) both ask
// the children to checkpoint and stop (SIGUSR1); SIGKILL follows from the
// kubelet after its grace. One worker's failure dooms the attempt: the others
// get SIGTERM rather than wait in collectives.
int RunLocalWorkers(int nproc, const std::vector<std::string>& args) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return Fail(shard::Internal("cannot find this program (/proc/self/exe): " + ec.message()));
  shard::SuperviseOptions opts;
  opts.forward = {{SIGUSR1, SIGUSR1}, {SIGTERM, SIGUSR1}};
  opts.fails = [](const shard::ExitStatus& e) { return !e.ok() && !(e.signal == 0 && e.code == shardd::kExitPreempted); };
  opts.stop_grace_s = -1;  // SIGTERM only: the kubelet's SIGKILL is the backstop
  shard::Supervisor sup(opts);
  for (int i = 0; i < nproc; ++i) {
    shard::SpawnOptions so;
    so.argv = args;
    so.argv[0] = self;
    so.argv.push_back("--local-index");
    so.argv.push_back(std::to_string(i));
    so.stdout_fd = 1;
    so.stderr_fd = 2;
    so.die_with_parent = true;
    auto p = sup.Spawn(i, so);
    if (!p.ok()) return Fail(p.status());  // the started ones are killed with the Supervisor
  }
  int code = 0;
  for (const shard::RankEnd& e : sup.Wait().ends) FoldExit(e.status, &code);
  return code;
}

// One JSON line per step for --metrics.
void WriteMetricsLine(std::ofstream& metrics, const shard::StepMetrics& m) {
  // JSON has no inf/NaN (a step the loss scaler skipped may hold them): null.
  metrics << "{\"step\":" << m.step << ",\"loss\":";
  if (std::isfinite(m.loss)) metrics << m.loss; else metrics << "null";
  metrics << ",\"lr\":" << m.lr << ",\"grad_norm\":";
  if (std::isfinite(m.grad_norm)) metrics << m.grad_norm; else metrics << "null";
  metrics << ",\"tokens\":" << m.tokens << ",\"seconds\":" << m.seconds;
  if (m.skipped || m.loss_scale != 1.0) metrics << ",\"loss_scale\":" << m.loss_scale;
  if (m.skipped) metrics << ",\"skipped\":true";
  metrics << "}\n";
  metrics.flush();
}

}  // namespace

int RunStandalone(const std::string& config_path, const std::vector<std::string>& sets, int rank, int world,
                  const std::string& rendezvous, const std::string& run_id, const std::string& hostname,
                  const std::string& metrics_path);

int main(int argc, char** argv) {
  CLI::App app{"shardd-worker: trains one rank of a shardd job"};
  bool standalone = false, probe = false;
  std::string config_path, metrics_path;
  shard::cli::LogFlags log;
  shard::cli::AddCommonFlags(app, "shardd-worker", &log);
  std::vector<std::string> sets;
  app.add_flag("--standalone", standalone, "Train the job file in this process, without a coordinator");
  app.add_flag("--probe", probe,
               "Print the GPUs this worker sees (name, compute capability, memory, bf16, links between them, "
               "driver and runtime versions) and exit: 0 with GPUs, 3 without");
  app.add_option("--config", config_path, "Job file (YAML)")->check(CLI::ExistingFile);
  app.add_option("--set", sets, "Override a job-file key: --set train.steps=100 (repeatable)");
  app.add_option("--metrics", metrics_path, "Append one JSON line of metrics per step to this file");
  int rank = -1, world = 0, nproc = 1, node_rank = -1, local_index = -1;
  bool brief = false;
  std::string log_dir;
  bool json = false;
  app.add_flag("--json", json, "With --probe: the GPUs as the planner reads them ({\"gpus\": [...]}; what shardd runs)");
  app.add_flag("--brief", brief, "With --probe: one line (\"8x NVIDIA A100-SXM4-80GB (sm_80, 79.2 GiB, bf16, nvlink)\")");
  // Number flags are bounded (shard::cli::FiniteRange): exit 2 naming the flag.
  shard::cli::FiniteRange(app.add_option("--nproc-per-node", nproc, "Start this many workers here, ranks "
                                         "node_rank*N .. node_rank*N+N-1 (a Kubernetes pod per node)")
                              ->capture_default_str(),
                          1, 1024);
  app.add_option("--node-rank", node_rank, "This host's index (default: JOB_COMPLETION_INDEX, else 0)");
  // Internal: set by --nproc-per-node on the workers it starts.
  app.add_option("--local-index", local_index, "")->group("");
  app.add_option("--log-dir", log_dir, "Append each worker's output to DIR/rank_<r>.log");
  std::string rendezvous, run_id = "run", hostname = "127.0.0.1";
  CLI::Option* rank_opt = app.add_option("--rank", rank, "This worker's rank in [0, world) (default: SLURM_PROCID, else "
                 "JOB_COMPLETION_INDEX x --nproc-per-node + local index, else 0)");
  shard::cli::FiniteRange(app.add_option("--world", world, "Number of workers (default: the job's parallel.world_size)"),
                          1, 1 << 20);
  app.add_option("--rendezvous", rendezvous,
                 "Where ranks find each other: file:DIR (a directory every rank can reach)");
  app.add_option("--run-id", run_id, "Namespaces rendezvous keys, so reruns sharing a directory do not mix")
      ->capture_default_str();
  app.add_option("--hostname", hostname, "Address this rank listens on for collectives")->capture_default_str();
  shardd::AgentOptions agent;
  app.add_option("--coordinator", agent.coordinator, "Coordinator address host:port (coordinator mode)");
  app.add_option("--job", agent.job_id, "Job id (coordinator mode)");
  app.add_option("--attempt", agent.attempt,
                 "Attempt number (coordinator mode); leave out to join the current attempt of a job submitted with "
                 "resources.launcher: external, with its join token in SHARDD_WORKER_TOKEN");
  app.add_option("--tls-ca", agent.tls.ca,
                 "PEM CA to verify the coordinator's TLS certificate (default $SHARDD_TLS_CA)");
  app.add_option("--tls-cert", agent.tls.cert,
                 "PEM client certificate for a coordinator with mutual TLS, with --tls-key (default $SHARDD_TLS_CERT)");
  app.add_option("--tls-key", agent.tls.key, "PEM private key of --tls-cert (default $SHARDD_TLS_KEY)");
  // SHARDD_<FLAG> for each flag. Not: the TLS ones (read below, so errors
  // name the variable) and --log-dir (SHARDD_LOG_DIR is the Kubernetes pod
  // script's, which links rank logs to the pod's log itself).
  shard::cli::BindEnv(app, {"--set", "--local-index", "--tls-ca", "--tls-cert", "--tls-key", "--log-dir"});
  if (auto code = shard::cli::Parse(app, argc, argv, "shardd-worker")) return *code;
  shard::InitLogging(log.level, log.format);

  if (rank_opt->count() > 0 && rank < 0)
    return Fail(shard::InvalidArgument("--rank " + std::to_string(rank) + ": a rank must be 0 or more"),
                shardd::kExitBadInput);
  if (probe) {
    auto hw = shard::ProbeHardware();
    if (!hw.ok()) return Fail(hw.status(), 3);
    const std::string text = json ? ProbedGpusJson(*hw) + "\n" : brief ? hw->Brief() + "\n" : hw->ToString();
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  // Placement and logs for one local worker; the body of each rank.
  auto run_one = [&](int local) -> int {
    auto place = shardd::ResolvePlacement(rank, node_rank, nproc, local, [](const char* n) { return std::getenv(n); });
    if (!place.ok()) return Fail(place.status(), shardd::kExitBadInput);
    if (!log_dir.empty())
      if (auto st = RedirectLogs(log_dir, place->rank); !st.ok()) return Fail(st, shardd::kExitBadInput);
    shardd::InstallStopSignal();
    if (!standalone) {
      if (agent.coordinator.empty()) agent.coordinator = place->master;  // torchrun's MASTER_ADDR:MASTER_PORT
      if (agent.coordinator.empty() || agent.job_id.empty() || agent.attempt < 0)
        return Fail(shard::InvalidArgument("give --coordinator ADDR --job ID [--attempt N] (launched by shardd or "
                                           "joining an external job), or --standalone --config JOB.yaml"),
                    shardd::kExitBadInput);
      const char* token = std::getenv("SHARDD_WORKER_TOKEN");
      if (!token || !*token)
        return Fail(shard::InvalidArgument(agent.attempt == 0 ? "SHARDD_WORKER_TOKEN is not set (an external job's "
                                                                "join token: shardctl status JOB --json)"
                                                              : "SHARDD_WORKER_TOKEN is not set"),
                    shardd::kExitBadInput);
      shardd::AgentOptions a = agent;
      a.token = token;
      // shardd hands its workers these in the environment: errors name the
      // variable unless the flag was given.
      auto from_env = [](std::string& path, std::string& name, const char* var) {
        if (!path.empty()) return;
        name = var;
        if (const char* v = std::getenv(var); v && *v) path = v;
      };
      from_env(a.tls.ca, a.tls.ca_name, "SHARDD_TLS_CA");
      from_env(a.tls.cert, a.tls.cert_name, "SHARDD_TLS_CERT");
      from_env(a.tls.key, a.tls.key_name, "SHARDD_TLS_KEY");
      a.rank = place->rank;
      a.world_hint = place->world_hint;
      a.launcher_id = place->launcher_id;
      a.probe_devices = place->local_rank == 0;
      a.hostname = hostname;
      return shardd::RunAgent(a);
    }
    if (rendezvous.empty() && !place->master.empty())
      return Fail(shard::InvalidArgument("MASTER_ADDR/MASTER_PORT (" + place->master +
                                         ") name a TCP store, which --standalone does not have: give --rendezvous "
                                         "file:DIR, or start shardd there and drop --standalone"),
                  shardd::kExitBadInput);
    return RunStandalone(config_path, sets, place->rank, world > 0 || place->source != "RANK" ? world : place->world_hint, rendezvous, run_id,
                         hostname, metrics_path);
  };
  if (local_index >= 0) return run_one(local_index);
  if (nproc > 1) return RunLocalWorkers(nproc, std::vector<std::string>(argv, argv + argc));
  return run_one(0);
}

int RunStandalone(const std::string& config_path, const std::vector<std::string>& sets, int rank, int world,
                  const std::string& rendezvous, const std::string& run_id, const std::string& hostname,
                  const std::string& metrics_path) {
  if (config_path.empty()) return Fail(shard::InvalidArgument("--config JOB.yaml is required"), 2);

  auto job = shard::LoadJobConfig(config_path, sets);
  if (!job.ok()) return Fail(job.status(), 2);
  shard::DistContext dist;
  dist.stop_requested = shardd::StopRequested;
  dist.rank = rank;
  dist.world = world > 0 ? world : job->parallel.world_size;
  dist.prefix = job->name + "/" + run_id + "/";
  dist.gloo_hostname = hostname;
  dist.tensorboard = true;
  if (!rendezvous.empty()) {
    if (rendezvous.rfind("file:", 0) != 0)
      return Fail(shard::InvalidArgument("--rendezvous '" + rendezvous + "': expected file:DIR"), 2);
    dist.store = std::make_shared<shard::FileKvStore>(rendezvous.substr(5));
  } else if (dist.world > 1) {
    return Fail(shard::InvalidArgument("a job with " + std::to_string(dist.world) +
                                       " ranks needs --rendezvous file:DIR"), 2);
  }
  shard::SetLogContext(job->name, 0, rank);

  std::ofstream metrics;
  metrics.precision(17);  // losses compared to 1e-6 and below must survive the file
  if (!metrics_path.empty()) {
    metrics.open(metrics_path, std::ios::app);
    if (!metrics) return Fail(shard::NotFound("cannot open --metrics file " + metrics_path), 2);
  }
  shardd::TrainerHooks hooks;
  if (metrics.is_open()) hooks.on_step = [&](const shard::StepMetrics& m) { WriteMetricsLine(metrics, m); };
  shardd::TrainOutcome run;
  // Before the trainer exists the job file, model or data are wrong; after,
  // only an error that no retry can fix (shardd::CanNeverSucceed) is bad input.
  if (shard::Status st = shardd::RunTrainer(*job, dist, hooks, &run); !st.ok())
    return Fail(st, !run.built || shardd::CanNeverSucceed(st) ? shardd::kExitBadInput : shardd::kExitFailed);
  if (run.stopped) {
    if (rank == 0)
      std::printf("stopped on %s at step %lld; checkpoint written: run again to resume\n", shardd::StopSignalName(),
                  static_cast<long long>(run.step));
    return shardd::kExitPreempted;
  }
  if (rank == 0 && run.nothing_trained)
    std::printf("already complete: %s is at step %lld >= train.steps %lld; nothing trained\n", run.resumed_from.c_str(),
                static_cast<long long>(run.step), static_cast<long long>(run.total_steps));
  else if (rank == 0)
    std::printf("done: %lld steps, loss %.4f -> %.4f\n", static_cast<long long>(run.step), run.first_loss,
                run.last_loss);
  return 0;
}
