// shardctl launch: forks one shardd-worker per rank on this machine (like
// torchrun --standalone), with a fresh file rendezvous, and supervises them:
// when any rank fails, the others are stopped (SIGTERM, then SIGKILL after a
// grace period) so no orphan keeps a half-dead job running.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <thread>

#include "coordinator/ctl/commands.h"
#include "shard/spec/job_config.h"

namespace shardctl {
namespace fs = std::filesystem;

namespace {

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
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {worker, "--standalone", "--config", o.job_file, "--rank", std::to_string(r),
                                     "--world", std::to_string(world), "--rendezvous", "file:" + rdv};
    for (const auto& s : o.sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    if (!o.metrics_prefix.empty()) {
      args.push_back("--metrics");
      args.push_back(o.metrics_prefix + std::to_string(r) + ".jsonl");
    }
    pid_t pid = ::fork();
    if (pid < 0) return shard::Internal("fork failed");
    if (pid == 0) {
      // Share the cores between the ranks unless the user chose (the pool and
      // OpenBLAS would otherwise each start one thread per core in every rank).
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      const std::string per_rank = std::to_string(std::max(1u, cores / static_cast<unsigned>(world)));
      ::setenv("SHARDD_NUM_THREADS", per_rank.c_str(), /*overwrite=*/0);
      ::setenv("OPENBLAS_NUM_THREADS", per_rank.c_str(), /*overwrite=*/0);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "shardctl: cannot run %s (set --worker-bin or SHARDD_WORKER_BIN)\n", argv[0]);
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int failed_rank = -1, failed_status = 0, alive = world;
  std::vector<bool> done(world, false);
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < world; ++r) {
        if (pids[r] != pid) continue;
        done[r] = true;
        --alive;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0) {
          failed_rank = r;
          failed_status = status;
          std::fprintf(stderr, "shardctl: rank %d %s %d; stopping the other ranks\n", r,
                       WIFSIGNALED(status) ? "was killed by signal" : "exited with code",
                       WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
          for (int k = 0; k < world; ++k)
            if (!done[k]) ::kill(pids[k], SIGTERM);
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        }
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int k = 0; k < world; ++k)
        if (!done[k]) ::kill(pids[k], SIGKILL);
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::error_code ec;
  fs::remove_all(rdv, ec);
  if (failed_rank >= 0)
    return shard::Aborted("rank " + std::to_string(failed_rank) + " failed (" +
                          (WIFSIGNALED(failed_status) ? "signal " + std::to_string(WTERMSIG(failed_status))
                                                      : "exit code " + std::to_string(WEXITSTATUS(failed_status))) +
                          "); committed checkpoints stay in " + shard::CheckpointJobDir(job) +
                          " and the next launch resumes from the newest");
  return shard::OkStatus();
}

}  // namespace shardctl
