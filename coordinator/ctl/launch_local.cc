// shardctl launch: forks one shardd-worker per rank on this machine (like
// torchrun --standalone), with a fresh file rendezvous, and supervises them:
// when any rank fails, the others are stopped (SIGTERM, then SIGKILL after a
// grace period) so no orphan keeps a half-dead job running.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "coordinator/ctl/commands.h"
#include "shard/common/process.h"
#include "shard/spec/job_config.h"

namespace shardctl {
namespace fs = std::filesystem;

namespace {

constexpr double kStopGraceS = 5;

std::string FindWorkerBinary(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("SHARDD_WORKER_BIN")) return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  for (const char* rel : {"shardd-worker", "../../worker/shardd-worker", "../worker/shardd-worker"}) {
    fs::path p = self.parent_path() / rel;
    if (!ec && fs::exists(p)) return fs::weakly_canonical(p).string();
  }
  return "shardd-worker";  // from PATH
}

// The workers lead their own process groups, so a terminal's Ctrl-C reaches
// only shardctl: it passes the signal on.
std::atomic<int> g_forward_signal{0};
void OnForwardSignal(int sig) { g_forward_signal.store(sig); }

void InstallForwarding() {
  struct sigaction sa = {};
  sa.sa_handler = OnForwardSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// One worker per rank. Each dies with shardctl (PR_SET_PDEATHSIG): a
// SIGKILLed launcher leaves no rank training on its own.
shard::StatusOr<std::vector<shard::Process>> SpawnRanks(const LaunchOptions& o, const std::string& worker, int world,
                                                        const std::string& rdv) {
  // Share the cores between the ranks unless the user chose (the pool and
  // OpenBLAS would otherwise each start one thread per core in every rank).
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string per_rank = std::to_string(std::max(1u, cores / static_cast<unsigned>(world)));
  std::vector<shard::Process> procs;
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
    auto p = shard::Process::Spawn(so);
    if (!p.ok()) {
      std::vector<shard::Process*> started;
      for (auto& q : procs) started.push_back(&q);
      shard::StopAll(started, kStopGraceS);
      return shard::Status(p.status().code(),
                           p.status().message() + " (set --worker-bin or SHARDD_WORKER_BIN)");
    }
    procs.push_back(std::move(*p));
  }
  return procs;
}

// Waits for every rank. The first failure (or a forwarded signal) stops the
// others: SIGTERM, then SIGKILL after the grace. Returns the failure.
shard::Status Supervise(std::vector<shard::Process>& procs) {
  const int world = static_cast<int>(procs.size());
  std::vector<shard::Process*> all;
  for (auto& p : procs) all.push_back(&p);
  int failed_rank = -1;
  shard::ExitStatus failed;
  while (std::any_of(procs.begin(), procs.end(), [](shard::Process& p) { return p.running(); })) {
    if (const int sig = g_forward_signal.exchange(0); sig != 0) {
      std::fprintf(stderr, "shardctl: %s: stopping the workers\n", ::strsignal(sig));
      for (auto& p : procs) p.Signal(sig);
      shard::StopAll(all, kStopGraceS);
      return shard::Aborted(std::string("interrupted by ") + ::strsignal(sig));
    }
    for (int r = 0; r < world && failed_rank < 0; ++r) {
      const auto e = procs[r].Poll();
      if (!e || e->ok()) continue;
      failed_rank = r;
      failed = *e;
      std::fprintf(stderr, "shardctl: rank %d %s; stopping the other ranks\n", r, e->Describe().c_str());
      shard::StopAll(all, kStopGraceS);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (failed_rank < 0) return shard::OkStatus();
  return shard::Aborted("rank " + std::to_string(failed_rank) + " failed (" +
                        (failed.signal ? "signal " + std::to_string(failed.signal)
                                       : "exit code " + std::to_string(failed.code)) +
                        ")");
}

}  // namespace

shard::Status RunLaunch(const LaunchOptions& o) {
  ASSIGN_OR_RETURN(shard::JobConfig job, shard::LoadJobConfig(o.job_file, o.sets));
  const int world = job.parallel.world_size;
  const std::string worker = FindWorkerBinary(o.worker_bin);
  char tmpl[] = "/tmp/shardd-rdv-XXXXXX";
  if (!::mkdtemp(tmpl)) return shard::Internal("cannot create a rendezvous directory under /tmp");
  const std::string rdv = tmpl;
  std::fprintf(stderr, "shardctl: launching %d worker(s) of job %s (%s), rendezvous %s\n", world, job.name.c_str(),
               shard::StrategyName(job.parallel.strategy), rdv.c_str());
  InstallForwarding();
  auto procs = SpawnRanks(o, worker, world, rdv);
  shard::Status st = procs.ok() ? Supervise(*procs) : procs.status();
  std::error_code ec;
  fs::remove_all(rdv, ec);
  if (!st.ok() && procs.ok())
    return shard::Status(st.code(), st.message() + "; committed checkpoints stay in " + shard::CheckpointJobDir(job) +
                                        " and the next launch resumes from the newest");
  return st;
}

}  // namespace shardctl
