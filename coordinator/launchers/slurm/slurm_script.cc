#include "coordinator/launchers/slurm/slurm_script.h"

#include "coordinator/launchers/command.h"

namespace shardd {

std::string SlurmJobName(const std::string& job_id, int attempt) {
  return "shardd-" + job_id + "-a" + std::to_string(attempt);
}

std::string RenderSbatchScript(const LaunchRequest& req) {
  const shard::SlurmConfig& c = req.resources.slurm;
  const int nodes = c.Nodes(req.world), tasks = c.TasksPerNode(req.world);
  std::string s = "#!/bin/bash\n";
  auto opt = [&](const std::string& o) { s += "#SBATCH " + o + "\n"; };
  opt("--job-name=" + SlurmJobName(req.job_id, req.attempt));
  opt("--nodes=" + std::to_string(nodes));
  opt("--ntasks-per-node=" + std::to_string(tasks));
  if (c.gpus_per_node > 0) {
    if (c.gpu_request == shard::GpuRequest::kGres) opt("--gres=gpu:" + std::to_string(c.gpus_per_node));
    else opt("--gpus-per-task=" + std::to_string(c.gpus_per_node / tasks));
  }
  if (c.cpus_per_task > 0) opt("--cpus-per-task=" + std::to_string(c.cpus_per_task));
  if (!c.partition.empty()) opt("--partition=" + c.partition);
  if (!c.account.empty()) opt("--account=" + c.account);
  if (!c.qos.empty()) opt("--qos=" + c.qos);
  if (!c.time.empty()) opt("--time=" + c.time);
  if (!c.mem.empty()) opt("--mem=" + c.mem);
  opt(c.requeue ? "--requeue" : "--no-requeue");
  if (c.signal_s > 0) opt("--signal=B:USR1@" + std::to_string(c.signal_s));
  opt("--output=" + req.log_dir + "/slurm.log");
  opt("--chdir=" + req.workdir);
  opt("--export=ALL");
  for (const std::string& a : c.sbatch_args) opt(a);
  s += "# Rendered by shardd for job " + req.job_id + ", attempt " + std::to_string(req.attempt) + " (" +
       std::to_string(req.world) + " ranks). The worker token arrives in the environment, not in this file.\n";
  s += "set -u\n";
  for (const std::string& line : c.setup) s += line + "\n";
  for (const auto& [k, v] : c.env) s += "export " + k + "=" + ShellQuote(v) + "\n";
  s += "echo \"shardd: slurm job ${SLURM_JOB_ID} on $(hostname), restart ${SLURM_RESTART_COUNT:-0}\"\n";
  // One task per rank; the worker takes its rank from SLURM_PROCID. A failed
  // rank does not take the others down here: the coordinator ends the
  // attempt, so every rank can report first.
  s += "srun --kill-on-bad-exit=0 --output=" + ShellQuote(req.log_dir + "/rank_%t.log") + " " +
       ShellQuote(req.worker_bin) + " --coordinator " + ShellQuote(req.coordinator) + " --job " +
       ShellQuote(req.job_id) + " --attempt " + std::to_string(req.attempt) + " &\n";
  s += "srun_pid=$!\n";
  // srun passes SIGUSR1 on to every task.
  s += "trap 'echo \"shardd: SIGUSR1: asking the workers to checkpoint and stop\"; kill -USR1 \"$srun_pid\"' USR1\n";
  s += "rc=0\n";
  s += "while :; do\n";
  s += "  wait \"$srun_pid\"; rc=$?\n";
  s += "  kill -0 \"$srun_pid\" 2>/dev/null || break  # wait was cut short by the trap: srun still runs\n";
  s += "done\n";
  s += "echo \"shardd: workers exited with code $rc\"\n";
  s += "exit \"$rc\"\n";
  return s;
}

}  // namespace shardd
