#include "coordinator/launchers/local/local_launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace shardd {

void LocalLauncher::Proc::Signal(int sig) {
  if (child) proc.Signal(sig);
  else ::kill(-pid, sig);
}

LocalLauncher::~LocalLauncher() {
  // Children are SIGKILLed and reaped by their Process; adopted ranks by hand.
  for (Proc& p : procs_)
    if (!p.done && !p.child) ::kill(-p.pid, SIGKILL);
}

StatusOr<std::vector<int>> LocalLauncher::Launch(const LaunchRequest& req) {
  std::error_code ec;
  std::filesystem::create_directories(req.log_dir, ec);
  if (ec) return shard::Internal("cannot create log dir " + req.log_dir + ": " + ec.message());
  if (::access(req.worker_bin.c_str(), X_OK) != 0)
    return shard::NotFound("worker binary " + req.worker_bin + " is not executable: " + std::strerror(errno));
  std::vector<int> pids;
  for (int r = 0; r < req.world; ++r) {
    shard::SpawnOptions o;
    o.argv = {req.worker_bin, "--coordinator", req.coordinator, "--job", req.job_id,
              "--attempt", std::to_string(req.attempt), "--rank", std::to_string(r)};
    // req.env replaces an inherited value; the coordinator's own secrets are
    // not inherited.
    o.env.unset.assign(std::begin(kCoordinatorOnlyEnv), std::end(kCoordinatorOnlyEnv));
    o.env.set = req.env;
    o.cwd = req.workdir;
    o.log_path = (std::filesystem::path(req.log_dir) / ("rank_" + std::to_string(r) + ".log")).string();
    // No die_with_parent: a restarted coordinator adopts its running workers.
    auto proc = shard::Process::Spawn(o);
    if (!proc.ok()) {
      Terminate(req.job_id, req.attempt, /*force=*/true);
      return proc.status();
    }
    pids.push_back(proc->pid());
    Proc p;
    p.job_id = req.job_id;
    p.attempt = req.attempt;
    p.rank = r;
    p.pid = proc->pid();
    p.proc = std::move(*proc);
    procs_.push_back(std::move(p));
  }
  return pids;
}

std::vector<RankExit> LocalLauncher::Poll() {
  std::vector<RankExit> out;
  for (Proc& p : procs_) {
    if (p.done) continue;
    if (p.child) {
      const std::optional<shard::ExitStatus> st = p.proc.Poll();
      if (!st) continue;
      p.done = true;
      RankExit e{p.job_id, p.attempt, p.rank, st->signal == 0 ? st->code : 0, st->signal, ""};
      // Whatever the worker left in its group goes with it.
      p.proc.Signal(SIGKILL);
      out.push_back(e);
    } else if (::kill(p.pid, 0) != 0 && errno == ESRCH) {
      p.done = true;
      out.push_back({p.job_id, p.attempt, p.rank, -1, 0, ""});  // adopted: the code is not ours to see
    }
  }
  std::erase_if(procs_, [](const Proc& p) { return p.done; });
  return out;
}

void LocalLauncher::Terminate(const std::string& job_id, int attempt, bool force) {
  for (Proc& p : procs_)
    if (!p.done && p.job_id == job_id && p.attempt == attempt) p.Signal(force ? SIGKILL : SIGTERM);
}

int LocalLauncher::Running(const std::string& job_id, int attempt) {
  int n = 0;
  for (const Proc& p : procs_)
    if (!p.done && p.job_id == job_id && p.attempt == attempt) ++n;
  return n;
}

void LocalLauncher::Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) {
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    // Only a process that is still this job's worker: a pid from the database
    // may have been reused by anything since.
    std::ifstream f("/proc/" + std::to_string(pids[r]) + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string want = std::string("--job") + '\0' + job_id + '\0' + "--attempt" + '\0' +
                             std::to_string(attempt) + '\0';
    if (cmd.find(want) == std::string::npos) continue;
    Proc p;
    p.job_id = job_id;
    p.attempt = attempt;
    p.rank = static_cast<int>(r);
    p.pid = pids[r];
    p.child = false;
    procs_.push_back(std::move(p));
  }
}

}  // namespace shardd
