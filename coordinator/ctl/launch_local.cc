// shardctl launch: starts one shardd-worker per rank on this machine (like
// torchrun --standalone), with a fresh file rendezvous, and supervises them
// (shard::Supervisor): when any rank fails, the others are stopped (SIGTERM,
// then SIGKILL after a grace period) so no orphan keeps a half-dead job running.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "coordinator/daemon/coordinator.h"
#include "coordinator/ctl/commands.h"
#include "shard/common/supervisor.h"
#include "shard/spec/job_config.h"

namespace shardctl {
namespace fs = std::filesystem;

namespace {

constexpr double kStopGraceS = 5;

// The ranks' ends as shardctl reports them: a line when the first failure
// stops the others, a line when a signal is passed on (the workers lead their
// own process groups, so a terminal's Ctrl-C reaches only shardctl).
shard::SuperviseOptions LaunchSupervision() {
  shard::SuperviseOptions so;
  so.forward = {{SIGINT, SIGINT}, {SIGTERM, SIGTERM}, {SIGHUP, SIGHUP}};
  so.stop_on_signal = true;
  so.stop_grace_s = kStopGraceS;
  so.on_signal = [](int sig) { std::fprintf(stderr, "shardctl: %s: stopping the workers\n", ::strsignal(sig)); };
  so.on_end = [](const shard::RankEnd& e, bool dooms) {
    if (dooms)
      std::fprintf(stderr, "shardctl: rank %d %s; stopping the other ranks\n", e.rank, e.status.Describe().c_str());
  };
  return so;
}

// One worker per rank. Each dies with shardctl (PR_SET_PDEATHSIG): a
// SIGKILLed launcher leaves no rank training on its own.
shard::Status SpawnRanks(shard::Supervisor& sup, const LaunchOptions& o, const std::string& worker, int world,
                         const std::string& rdv) {
  // Share the cores between the ranks unless the user chose (the pool and
  // OpenBLAS would otherwise each start one thread per core in every rank).
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string per_rank = std::to_string(std::max(1u, cores / static_cast<unsigned>(world)));
  for (int r = 0; r < world; ++r) {
    shard::SpawnOptions so;
    so.argv = {worker, "--standalone", "--config", o.job_file, "--rank", std::to_string(r),
               "--world", std::to_string(world), "--rendezvous", "file:" + rdv};
    for (const auto& s : o.sets) {
      so.argv.push_back("--set");
      so.argv.push_back(s);
    }
    if (!o.metrics_prefix.empty()) {
      so.argv.push_back("--metrics");
      so.argv.push_back(o.metrics_prefix + std::to_string(r) + ".jsonl");
    }
    so.env.defaults = {{"SHARDD_NUM_THREADS", per_rank}, {"OPENBLAS_NUM_THREADS", per_rank}};
    so.stdout_fd = 1;
    so.stderr_fd = 2;
    so.die_with_parent = true;
    auto p = sup.Spawn(r, so);
    if (!p.ok()) {
      sup.Stop();
      return shard::Status(p.status().code(), p.status().message() + " (set --worker-bin or SHARDD_WORKER_BIN)");
    }
  }
  return shard::OkStatus();
}

// Waits for every rank. The first failure (or a passed-on signal) stops the
// others: SIGTERM, then SIGKILL after the grace. Returns the failure.
shard::Status Supervise(shard::Supervisor& sup) {
  const shard::SuperviseResult r = sup.Wait();
  if (r.signal != 0) return shard::Aborted(std::string("interrupted by ") + ::strsignal(r.signal));
  if (r.failed_rank < 0) return shard::OkStatus();
  shard::ExitStatus failed;
  for (const shard::RankEnd& e : r.ends)
    if (e.rank == r.failed_rank) failed = e.status;
  return shard::Aborted("rank " + std::to_string(r.failed_rank) + " failed (" +
                        (failed.signal ? "signal " + std::to_string(failed.signal)
                                       : "exit code " + std::to_string(failed.code)) +
                        ")");
}

}  // namespace

shard::Status RunLaunch(const LaunchOptions& o) {
  ASSIGN_OR_RETURN(shard::JobConfig job, shard::LoadJobConfig(o.job_file, o.sets));
  const int world = job.parallel.world_size;
  const std::string worker = o.worker_bin.empty() ? shardd::FindWorkerBinary() : o.worker_bin;
  char tmpl[] = "/tmp/shardd-rdv-XXXXXX";
  if (!::mkdtemp(tmpl)) return shard::Internal("cannot create a rendezvous directory under /tmp");
  const std::string rdv = tmpl;
  std::fprintf(stderr, "shardctl: launching %d worker(s) of job %s (%s), rendezvous %s\n", world, job.name.c_str(),
               shard::StrategyName(job.parallel.strategy), rdv.c_str());
  shard::Supervisor sup(LaunchSupervision());
  const shard::Status spawned = SpawnRanks(sup, o, worker, world, rdv);
  shard::Status st = spawned.ok() ? Supervise(sup) : spawned;
  std::error_code ec;
  fs::remove_all(rdv, ec);
  if (!st.ok() && spawned.ok())
    return shard::Status(st.code(), st.message() + "; committed checkpoints stay in " + shard::CheckpointJobDir(job) +
                                        " and the next launch resumes from the newest");
  return st;
}

}  // namespace shardctl
