#include "coordinator/launchers/local/local_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace shardd {

namespace {

extern "C" char** environ;

}  // namespace

LocalLauncher::~LocalLauncher() {
  for (Proc& p : procs_)
    if (!p.done) ::kill(-p.pid, SIGKILL);
  for (Proc& p : procs_)
    if (!p.done && p.child) ::waitpid(p.pid, nullptr, 0);
}

StatusOr<std::vector<int>> LocalLauncher::Launch(const LaunchRequest& req) {
  std::error_code ec;
  std::filesystem::create_directories(req.log_dir, ec);
  if (ec) return shard::Internal("cannot create log dir " + req.log_dir + ": " + ec.message());
  if (::access(req.worker_bin.c_str(), X_OK) != 0)
    return shard::NotFound("worker binary " + req.worker_bin + " is not executable: " + std::strerror(errno));
  std::vector<int> pids;
  for (int r = 0; r < req.world; ++r) {
    // Everything the child needs is built before fork: after it, only
    // async-signal-safe calls.
    const std::string log = (std::filesystem::path(req.log_dir) / ("rank_" + std::to_string(r) + ".log")).string();
    std::vector<std::string> args = {req.worker_bin, "--coordinator", req.coordinator, "--job", req.job_id,
                                     "--attempt", std::to_string(req.attempt), "--rank", std::to_string(r)};
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      const std::string name = kv.substr(0, kv.find('='));
      // req.env replaces an inherited value (getenv would find the first).
      if (req.env.count(name)) continue;
      if (std::find(std::begin(kCoordinatorOnlyEnv), std::end(kCoordinatorOnlyEnv), name) !=
          std::end(kCoordinatorOnlyEnv))
        continue;
      env_strings.push_back(kv);
    }
    for (const auto& [k, v] : req.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);

    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return shard::Internal("cannot open log " + log + ": " + std::strerror(errno));
    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fd);
      Terminate(req.job_id, req.attempt, /*force=*/true);
      return shard::ResourceExhausted(std::string("fork failed: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
      if (::chdir(req.workdir.c_str()) != 0) _exit(126);
      ::execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    ::setpgid(pid, pid);  // also from the parent: no race with an early kill
    ::close(fd);
    procs_.push_back({req.job_id, req.attempt, r, pid, true, false});
    pids.push_back(pid);
  }
  return pids;
}

std::vector<RankExit> LocalLauncher::Poll() {
  std::vector<RankExit> out;
  for (Proc& p : procs_) {
    if (p.done) continue;
    if (p.child) {
      int status = 0;
      pid_t r = ::waitpid(p.pid, &status, WNOHANG);
      if (r != p.pid) continue;
      p.done = true;
      RankExit e{p.job_id, p.attempt, p.rank, 0, 0, ""};
      if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      else e.exit_code = WEXITSTATUS(status);
      // Whatever the worker left in its group goes with it.
      ::kill(-p.pid, SIGKILL);
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
    if (!p.done && p.job_id == job_id && p.attempt == attempt) ::kill(-p.pid, force ? SIGKILL : SIGTERM);
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
    procs_.push_back({job_id, attempt, static_cast<int>(r), pids[r], false, false});
  }
}

}  // namespace shardd
