// shardd-worker: one training process. With --standalone it trains a job file
// by itself (like torchrun for debugging or a user's own launcher); the
// coordinator-driven mode arrives with the control plane.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>

#include "shard/common/logging.h"
#include "shard/train/trainer.h"

namespace {

int Fail(const shard::Status& st, int code = 1) {
  std::fprintf(stderr, "shardd-worker: %s\n", st.ToString().c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardd-worker: trains one rank of a shardd job"};
  bool standalone = false;
  std::string config_path, metrics_path, log_level = "info";
  std::vector<std::string> sets;
  app.add_flag("--standalone", standalone, "Train the job file in this process, without a coordinator");
  app.add_option("--config", config_path, "Job file (YAML)")->check(CLI::ExistingFile);
  app.add_option("--set", sets, "Override a job-file key: --set train.steps=100 (repeatable)");
  app.add_option("--metrics", metrics_path, "Append one JSON line of metrics per step to this file");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);
  shard::InitLogging(log_level);

  if (!standalone)
    return Fail(shard::Unimplemented("coordinator mode is not built yet; run with --standalone --config JOB.yaml"), 2);
  if (config_path.empty()) return Fail(shard::InvalidArgument("--config JOB.yaml is required"), 2);

  auto job = shard::LoadJobConfig(config_path, sets);
  if (!job.ok()) return Fail(job.status(), 2);
  shard::SetLogContext(job->name, 0, 0);

  auto trainer = shard::Trainer::Create(*job);
  if (!trainer.ok()) return Fail(trainer.status(), 2);

  std::ofstream metrics;
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
  std::printf("done: %lld steps, loss %.4f -> %.4f\n", static_cast<long long>((*trainer)->step()), first_loss,
              last_loss);
  return 0;
}
