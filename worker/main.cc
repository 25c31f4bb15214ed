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
#include <utility>
#include <functional>
#include <vector>

#include "shard/backend/hardware_probe.h"
#include "shard/ckpt/resume_plan.h"
#include "shard/common/kv_stores.h"
#include "shard/common/cli_conventions.h"
#include "shard/common/logging.h"
#include "shard/common/supervisor.h"
#include "shard/plan/hardware.h"
#include "shard/spec/step_metric_fields.h"
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
    p.pci_bus_id = g.pci_bus_id;
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
  // The optional figures (shard/spec/step_metric_fields.h) under their
  // display names (TRL's rewards/chosen, ...), as shardctl metrics --json
  // writes them, each group after its count (pairs, eval_pairs, ...).
  int64_t shard::StepMetrics::*count = nullptr;
  for (const shard::StepMetricField& f : shard::StepMetricFields()) {
    if (m.*f.present_if <= 0) continue;
    if (f.present_if != count) {
      count = f.present_if;
      metrics << ",\"" << shard::CountName(count) << "\":" << m.*count;
      if (count == &shard::StepMetrics::eval_pairs) {  // a preference: eval's pair loss
        metrics << ",\"eval_loss\":";
        if (std::isfinite(m.eval_loss)) metrics << m.eval_loss; else metrics << "null";
      }
    }
    metrics << ",\"" << f.display << "\":";
    if (std::isfinite(m.*f.value)) metrics << m.*f.value; else metrics << "null";
  }
  metrics << "}\n";
  metrics.flush();
}

}  // namespace

int RunStandalone(const std::string& config_path, const std::vector<std::string>& sets, int rank, int world,
                  const std::string& rendezvous, const std::string& run_id, const std::string& hostname,
                  const std::string& metrics_path);

namespace {

// Every flag of shardd-worker, as parsed.
struct WorkerFlags {
  bool standalone = false, probe = false, brief = false, json = false;
  std::string config_path, metrics_path, log_dir;
  std::string rendezvous, run_id = "run", hostname = "127.0.0.1";
  std::vector<std::string> sets;
  int rank = -1, world = 0, nproc = 1, node_rank = -1, local_index = -1;
  shard::cli::LogFlags log;
  shardd::AgentOptions agent;
  CLI::Option* rank_opt = nullptr;
};

void AddFlags(CLI::App& app, WorkerFlags& f) {
  shard::cli::AddCommonFlags(app, "shardd-worker", &f.log);
  app.add_flag("--standalone", f.standalone, "Train the job file in this process, without a coordinator");
  app.add_flag("--probe", f.probe,
               "Print the GPUs this worker sees (name, compute capability, memory, bf16, links between them, "
               "driver and runtime versions) and exit: 0 with GPUs, 3 without");
  app.add_option("--config", f.config_path, "Job file (YAML)")->check(CLI::ExistingFile);
  app.add_option("--set", f.sets, "Override a job-file key: --set train.steps=100 (repeatable)");
  app.add_option("--metrics", f.metrics_path, "Append one JSON line of metrics per step to this file");
  app.add_flag("--json", f.json, "With --probe: the GPUs as the planner reads them ({\"gpus\": [...]}; what shardd runs)");
  app.add_flag("--brief", f.brief, "With --probe: one line (\"8x NVIDIA A100-SXM4-80GB (sm_80, 79.2 GiB, bf16, nvlink)\")");
  // Number flags are bounded (shard::cli::FiniteRange): exit 2 naming the flag.
  shard::cli::FiniteRange(app.add_option("--nproc-per-node", f.nproc, "Start this many workers here, ranks "
                                         "node_rank*N .. node_rank*N+N-1 (a Kubernetes pod per node)")
                              ->capture_default_str(),
                          1, 1024);
  app.add_option("--node-rank", f.node_rank, "This host's index (default: JOB_COMPLETION_INDEX, else 0)");
  // Internal: set by --nproc-per-node on the workers it starts.
  app.add_option("--local-index", f.local_index, "")->group("");
  app.add_option("--log-dir", f.log_dir, "Append each worker's output to DIR/rank_<r>.log");
  f.rank_opt = app.add_option("--rank", f.rank, "This worker's rank in [0, world) (default: SLURM_PROCID, else "
                 "JOB_COMPLETION_INDEX x --nproc-per-node + local index, else 0)");
  shard::cli::FiniteRange(app.add_option("--world", f.world, "Number of workers (default: the job's parallel.world_size)"),
                          1, 1 << 20);
  app.add_option("--rendezvous", f.rendezvous,
                 "Where ranks find each other: file:DIR (a directory every rank can reach)");
  app.add_option("--run-id", f.run_id, "Namespaces rendezvous keys, so reruns sharing a directory do not mix")
      ->capture_default_str();
  app.add_option("--hostname", f.hostname, "Address this rank listens on for collectives")->capture_default_str();
  app.add_option("--coordinator", f.agent.coordinator, "Coordinator address host:port (coordinator mode)");
  app.add_option("--job", f.agent.job_id, "Job id (coordinator mode)");
  app.add_option("--attempt", f.agent.attempt,
                 "Attempt number (coordinator mode); leave out to join the current attempt of a job submitted with "
                 "resources.launcher: external, with its join token in SHARDD_WORKER_TOKEN");
  app.add_option("--tls-ca", f.agent.tls.ca,
                 "PEM CA to verify the coordinator's TLS certificate (default $SHARDD_TLS_CA)");
  app.add_option("--tls-cert", f.agent.tls.cert,
                 "PEM client certificate for a coordinator with mutual TLS, with --tls-key (default $SHARDD_TLS_CERT)");
  app.add_option("--tls-key", f.agent.tls.key, "PEM private key of --tls-cert (default $SHARDD_TLS_KEY)");
  // SHARDD_<FLAG> for each flag. Not: the TLS ones (read below, so errors
  // name the variable) and --log-dir (SHARDD_LOG_DIR is the Kubernetes pod
  // script's, which links rank logs to the pod's log itself).
  shard::cli::BindEnv(app, {"--set", "--local-index", "--tls-ca", "--tls-cert", "--tls-key", "--log-dir"});
}

int RunProbe(const WorkerFlags& f) {
  auto hw = shard::ProbeHardware();
  if (!hw.ok()) return Fail(hw.status(), 3);
  const std::string text = f.json ? ProbedGpusJson(*hw) + "\n" : f.brief ? hw->Brief() + "\n" : hw->ToString();
  std::fputs(text.c_str(), stdout);
  return 0;
}

// Coordinator mode: the agent for this placement.
int RunAgentRank(const WorkerFlags& f, const shardd::WorkerPlacement& place) {
  shardd::AgentOptions a = f.agent;
  if (a.coordinator.empty()) a.coordinator = place.master;  // torchrun's MASTER_ADDR:MASTER_PORT
  if (a.coordinator.empty() || a.job_id.empty() || a.attempt < 0)
    return Fail(shard::InvalidArgument("give --coordinator ADDR --job ID [--attempt N] (launched by shardd or "
                                       "joining an external job), or --standalone --config JOB.yaml"),
                shardd::kExitBadInput);
  const char* token = std::getenv("SHARDD_WORKER_TOKEN");
  if (!token || !*token)
    return Fail(shard::InvalidArgument(a.attempt == 0 ? "SHARDD_WORKER_TOKEN is not set (an external job's "
                                                        "join token: shardctl status JOB --json)"
                                                      : "SHARDD_WORKER_TOKEN is not set"),
                shardd::kExitBadInput);
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
  a.rank = place.rank;
  a.world_hint = place.world_hint;
  a.launcher_id = place.launcher_id;
  a.probe_devices = place.local_rank == 0;
  a.hostname = f.hostname;
  return shardd::RunAgent(a);
}

// Placement and logs for one local worker; the body of each rank.
int RunOne(const WorkerFlags& f, int local) {
  auto place = shardd::ResolvePlacement(f.rank, f.node_rank, f.nproc, local, [](const char* n) { return std::getenv(n); });
  if (!place.ok()) return Fail(place.status(), shardd::kExitBadInput);
  if (!f.log_dir.empty())
    if (auto st = RedirectLogs(f.log_dir, place->rank); !st.ok()) return Fail(st, shardd::kExitBadInput);
  shardd::InstallStopSignal();
  if (!f.standalone) return RunAgentRank(f, *place);
  if (f.rendezvous.empty() && !place->master.empty())
    return Fail(shard::InvalidArgument("MASTER_ADDR/MASTER_PORT (" + place->master +
                                       ") name a TCP store, which --standalone does not have: give --rendezvous "
                                       "file:DIR, or start shardd there and drop --standalone"),
                shardd::kExitBadInput);
  return RunStandalone(f.config_path, f.sets, place->rank,
                       f.world > 0 || place->source != "RANK" ? f.world : place->world_hint, f.rendezvous, f.run_id,
                       f.hostname, f.metrics_path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardd-worker: trains one rank of a shardd job"};
  WorkerFlags f;
  AddFlags(app, f);
  if (auto code = shard::cli::Parse(app, argc, argv, "shardd-worker")) return *code;
  shard::InitLogging(f.log.level, f.log.format);

  if (f.rank_opt->count() > 0 && f.rank < 0)
    return Fail(shard::InvalidArgument("--rank " + std::to_string(f.rank) + ": a rank must be 0 or more"),
                shardd::kExitBadInput);
  if (f.probe) return RunProbe(f);
  if (f.local_index >= 0) return RunOne(f, f.local_index);
  if (f.nproc > 1) return RunLocalWorkers(f.nproc, std::vector<std::string>(argv, argv + argc));
  return RunOne(f, 0);
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
  // The same plan a coordinator hands its workers, made from the job file
  // with the same chooser (the trainer verifies the step it names).
  std::vector<std::string> resume_events;
  auto plan = shard::StandalonePlan(*job, &resume_events);
  if (!plan.ok()) return Fail(plan.status(), shardd::kExitBadInput);
  if (rank == 0)
    for (const std::string& e : resume_events) LOG_WARN("resume: {}", e);
  dist.tiers = shard::TiersFromPlan(*plan, "", "");
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
