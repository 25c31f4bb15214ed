// shardd-worker: one training process. Launched by the coordinator it runs
// the agent (--coordinator ADDR --job ID --attempt N --rank R, token in
// SHARDD_WORKER_TOKEN); with --standalone it trains a job file by itself (like
// torchrun, for debugging or a user's own launcher).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "shard/backend/hardware_probe.h"
#include "shard/common/kv_stores.h"
#include "shard/common/logging.h"
#include "shard/train/trainer.h"
#include "worker/agent.h"

namespace {

int Fail(const shard::Status& st, int code = 1) {
  std::fprintf(stderr, "shardd-worker: %s\n", st.ToString().c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardd-worker: trains one rank of a shardd job"};
  bool standalone = false, probe = false;
  std::string config_path, metrics_path, log_level = "info";
  std::vector<std::string> sets;
  app.add_flag("--standalone", standalone, "Train the job file in this process, without a coordinator");
  app.add_flag("--probe", probe,
               "Print the GPUs this worker sees (name, compute capability, memory, bf16, links between them, "
               "driver and runtime versions) and exit: 0 with GPUs, 3 without");
  app.add_option("--config", config_path, "Job file (YAML)")->check(CLI::ExistingFile);
  app.add_option("--set", sets, "Override a job-file key: --set train.steps=100 (repeatable)");
  app.add_option("--metrics", metrics_path, "Append one JSON line of metrics per step to this file");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  int rank = 0, world = 0;
  std::string rendezvous, run_id = "run", hostname = "127.0.0.1";
  app.add_option("--rank", rank, "This worker's rank in [0, world)")->capture_default_str();
  app.add_option("--world", world, "Number of workers (default: the job's parallel.world_size)");
  app.add_option("--rendezvous", rendezvous,
                 "Where ranks find each other: file:DIR (a directory every rank can reach)");
  app.add_option("--run-id", run_id, "Namespaces rendezvous keys, so reruns sharing a directory do not mix")
      ->capture_default_str();
  app.add_option("--hostname", hostname, "Address this rank listens on for collectives")->capture_default_str();
  shardd::AgentOptions agent;
  app.add_option("--coordinator", agent.coordinator, "Coordinator address host:port (coordinator mode)");
  app.add_option("--job", agent.job_id, "Job id (coordinator mode)");
  app.add_option("--attempt", agent.attempt, "Attempt number (coordinator mode)");
  app.add_option("--tls-ca", agent.tls_ca, "PEM CA to verify the coordinator's TLS certificate");
  CLI11_PARSE(app, argc, argv);
  shard::InitLogging(log_level);

  if (probe) {
    auto hw = shard::ProbeHardware();
    if (!hw.ok()) return Fail(hw.status(), 3);
    std::fputs(hw->ToString().c_str(), stdout);
    return 0;
  }
  if (!standalone) {
    if (agent.coordinator.empty() || agent.job_id.empty() || agent.attempt <= 0)
      return Fail(shard::InvalidArgument("give --coordinator ADDR --job ID --attempt N --rank R (launched by shardd), "
                                         "or --standalone --config JOB.yaml"), 2);
    const char* token = std::getenv("SHARDD_WORKER_TOKEN");
    if (!token || !*token) return Fail(shard::InvalidArgument("SHARDD_WORKER_TOKEN is not set"), 2);
    agent.token = token;
    if (agent.tls_ca.empty())
      if (const char* ca = std::getenv("SHARDD_TLS_CA"); ca && *ca) agent.tls_ca = ca;
    agent.rank = rank;
    agent.hostname = hostname;
    return shardd::RunAgent(agent);
  }
  if (config_path.empty()) return Fail(shard::InvalidArgument("--config JOB.yaml is required"), 2);

  auto job = shard::LoadJobConfig(config_path, sets);
  if (!job.ok()) return Fail(job.status(), 2);
  shard::DistContext dist;
  dist.rank = rank;
  dist.world = world > 0 ? world : job->parallel.world_size;
  dist.prefix = job->name + "/" + run_id + "/";
  dist.gloo_hostname = hostname;
  if (!rendezvous.empty()) {
    if (rendezvous.rfind("file:", 0) != 0)
      return Fail(shard::InvalidArgument("--rendezvous '" + rendezvous + "': expected file:DIR"), 2);
    dist.store = std::make_shared<shard::FileKvStore>(rendezvous.substr(5));
  } else if (dist.world > 1) {
    return Fail(shard::InvalidArgument("a job with " + std::to_string(dist.world) +
                                       " ranks needs --rendezvous file:DIR"), 2);
  }
  shard::SetLogContext(job->name, 0, rank);

  auto trainer = shard::Trainer::Create(*job, dist);
  if (!trainer.ok()) return Fail(trainer.status(), 2);

  std::ofstream metrics;
  metrics.precision(17);  // losses compared to 1e-6 and below must survive the file
  if (!metrics_path.empty()) {
    metrics.open(metrics_path, std::ios::app);
    if (!metrics) return Fail(shard::NotFound("cannot open --metrics file " + metrics_path), 2);
  }
  double first_loss = -1, last_loss = -1;
  shard::Status st = (*trainer)->Run([&](const shard::StepMetrics& m) {
    if (first_loss < 0) first_loss = m.loss;
    last_loss = m.loss;
    if (metrics.is_open()) {
      metrics << "{\"step\":" << m.step << ",\"loss\":" << m.loss << ",\"lr\":" << m.lr
              << ",\"grad_norm\":" << m.grad_norm << ",\"tokens\":" << m.tokens << ",\"seconds\":" << m.seconds
              << "}\n";
      metrics.flush();
    }
  });
  if (!st.ok()) return Fail(st);
  if (rank == 0) std::printf("done: %lld steps, loss %.4f -> %.4f\n", static_cast<long long>((*trainer)->step()), first_loss,
              last_loss);
  return 0;
}
