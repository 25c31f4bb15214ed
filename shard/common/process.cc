#include "shard/common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <thread>

extern "C" char** environ;

namespace shard {
namespace {

// Signals whose "ignored" disposition would survive exec; a child starts with
// the defaults (the coordinator ignores SIGPIPE, for one).
constexpr int kResetSignals[] = {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD};

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Makes `fd` the child's `target` (dup2 clears close-on-exec; an fd already
// in place keeps its flags, so clear them by hand).
bool PlaceFd(int fd, int target) {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

// Reports errno through the status pipe and leaves. Async-signal-safe.
[[noreturn]] void ChildFail(int status_fd) {
  const int e = errno;
  (void)!::write(status_fd, &e, sizeof(e));
  ::_exit(127);
}

struct ChildPlan {
  const char* path;
  char* const* argv;
  char* const* envp;
  const char* cwd;  // null = stay
  int stdin_fd, stdout_fd, stderr_fd;  // -1 = inherit
  bool new_group;
  int die_signal;  // 0 = none
  pid_t parent;
  int status_fd;
};

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void RunChild(const ChildPlan& p) {
  if (p.new_group && ::setpgid(0, 0) != 0) ChildFail(p.status_fd);
  if (p.die_signal != 0) {
    if (::prctl(PR_SET_PDEATHSIG, p.die_signal) != 0) ChildFail(p.status_fd);
    // The parent may have died before prctl took effect: then nobody will
    // send the signal, so act on it now.
    if (::getppid() != p.parent) ::_exit(128 + p.die_signal);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : kResetSignals) ::signal(sig, SIG_DFL);
  if (p.stdin_fd >= 0 && !PlaceFd(p.stdin_fd, STDIN_FILENO)) ChildFail(p.status_fd);
  if (p.stdout_fd >= 0 && !PlaceFd(p.stdout_fd, STDOUT_FILENO)) ChildFail(p.status_fd);
  if (p.stderr_fd >= 0 && !PlaceFd(p.stderr_fd, STDERR_FILENO)) ChildFail(p.status_fd);
  if (p.cwd && ::chdir(p.cwd) != 0) ChildFail(p.status_fd);
  ::execve(p.path, p.argv, p.envp);
  ChildFail(p.status_fd);
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string ExitStatus::Describe() const {
  if (signal != 0) {
    const char* name = ::strsignal(signal);
    return "was killed by signal " + std::to_string(signal) + (name ? std::string(" (") + name + ")" : "");
  }
  return "exited with code " + std::to_string(code);
}

ExitStatus ExitStatus::FromWait(int wait_status) {
  ExitStatus e;
  if (WIFSIGNALED(wait_status)) e.signal = WTERMSIG(wait_status);
  else if (WIFEXITED(wait_status)) e.code = WEXITSTATUS(wait_status);
  return e;
}

std::vector<std::string> BuildEnvironment(const EnvOptions& opts) {
  std::vector<std::string> out;
  std::vector<std::string> seen;
  if (opts.inherit) {
    for (char** e = environ; e && *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (!eq) continue;
      std::string name(*e, eq - *e);
      if (opts.set.count(name)) continue;
      if (std::find(opts.unset.begin(), opts.unset.end(), name) != opts.unset.end()) continue;
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;  // getenv sees the first
      seen.push_back(name);
      out.push_back(*e);
    }
  }
  for (const auto& [k, v] : opts.set) {
    out.push_back(k + "=" + v);
    seen.push_back(k);
  }
  for (const auto& [k, v] : opts.defaults)
    if (std::find(seen.begin(), seen.end(), k) == seen.end()) out.push_back(k + "=" + v);
  return out;
}

StatusOr<std::string> FindExecutable(const std::string& argv0) {
  if (argv0.empty()) return InvalidArgument("no program to run");
  if (argv0.find('/') != std::string::npos) {
    if (!IsExecutableFile(argv0)) return NotFound("cannot run " + argv0 + ": not an executable file");
    return argv0;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string cand = dir + "/" + argv0;
    if (IsExecutableFile(cand)) return cand;
    start = end + 1;
  }
  return NotFound("cannot run " + argv0 + ": not found on PATH");
}

StatusOr<Process> Process::Spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return InvalidArgument("spawn: no command");
  ASSIGN_OR_RETURN(std::string exe, FindExecutable(opts.argv[0]));
  // Everything exec needs, built before fork.
  std::vector<std::string> args = opts.argv;
  std::vector<std::string> env = BuildEnvironment(opts.env);
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log_fd = -1, null_fd = -1;
  if (!opts.log_path.empty()) {
    log_fd = ::open(opts.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (log_fd < 0) return Internal("cannot open log " + opts.log_path + ": " + std::strerror(errno));
  }
  if (opts.stdin_fd < 0) {
    null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0) {
      CloseFd(log_fd);
      return Internal(std::string("cannot open /dev/null: ") + std::strerror(errno));
    }
  }
  // exec's failure comes back through this pipe; a successful exec closes it.
  int status_pipe[2] = {-1, -1};
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    CloseFd(log_fd);
    CloseFd(null_fd);
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  ChildPlan plan{exe.c_str(), argv.data(), envp.data(), opts.cwd.empty() ? nullptr : opts.cwd.c_str(),
                 opts.stdin_fd >= 0 ? opts.stdin_fd : null_fd,
                 log_fd >= 0 ? log_fd : opts.stdout_fd,
                 log_fd >= 0 ? log_fd : opts.stderr_fd,
                 opts.new_process_group, opts.die_with_parent ? opts.die_signal : 0, ::getpid(), status_pipe[1]};
  const pid_t pid = ::fork();
  if (pid == 0) RunChild(plan);
  const int fork_errno = errno;
  CloseFd(status_pipe[1]);
  CloseFd(log_fd);
  CloseFd(null_fd);
  if (pid < 0) {
    CloseFd(status_pipe[0]);
    return ResourceExhausted(std::string("fork failed: ") + std::strerror(fork_errno));
  }
  // Also from the parent, so a Signal right after Spawn cannot miss the group.
  if (opts.new_process_group) ::setpgid(pid, pid);
  int child_errno = 0;
  ssize_t got;
  do {
    got = ::read(status_pipe[0], &child_errno, sizeof(child_errno));
  } while (got < 0 && errno == EINTR);
  CloseFd(status_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof(child_errno))) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    const std::string what = !opts.cwd.empty() && child_errno == ENOENT ? " (in " + opts.cwd + ")" : "";
    return NotFound("cannot run " + opts.argv[0] + what + ": " + std::strerror(child_errno));
  }
  Process p;
  p.pid_ = pid;
  p.group_ = opts.new_process_group;
  return p;
}

Process& Process::operator=(Process&& o) noexcept {
  if (this != &o) {
    this->~Process();
    pid_ = o.pid_;
    group_ = o.group_;
    exit_ = o.exit_;
    o.pid_ = -1;
    o.exit_.reset();
  }
  return *this;
}

Process::~Process() {
  if (pid_ > 0 && !exit_) {
    Signal(SIGKILL);
    Wait();
  }
  pid_ = -1;
}

pid_t Process::Release() {
  const pid_t pid = pid_;
  pid_ = -1;
  exit_.reset();
  return pid;
}

std::optional<ExitStatus> Process::Poll() {
  if (pid_ <= 0 || exit_) return exit_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) exit_ = ExitStatus::FromWait(status);
  else if (r < 0) exit_ = ExitStatus{};  // not ours to reap any more (ECHILD): unknown code
  return exit_;
}

std::optional<ExitStatus> Process::Wait(double timeout_s) {
  if (timeout_s < 0) {
    if (pid_ <= 0 || exit_) return exit_;
    int status = 0;
    pid_t r;
    do {
      r = ::waitpid(pid_, &status, 0);
    } while (r < 0 && errno == EINTR);
    exit_ = r == pid_ ? ExitStatus::FromWait(status) : ExitStatus{};
    return exit_;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    if (auto e = Poll()) return e;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Process::Signal(int sig) {
  if (pid_ <= 0) return;
  if (group_) ::kill(-pid_, sig);
  else if (!exit_) ::kill(pid_, sig);
}

ExitStatus Process::Stop(double grace_s) {
  std::vector<Process*> one = {this};
  StopAll(one, grace_s);
  return exit_.value_or(ExitStatus{});
}

StatusOr<CapturedRun> RunCapturingStdout(SpawnOptions opts, CapturedStderr err) {
  int out_pipe[2] = {-1, -1};
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
  int null_fd = -1;
  if (err == CapturedStderr::kDiscard) null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  opts.log_path.clear();
  opts.stdout_fd = out_pipe[1];
  if (err == CapturedStderr::kMerge) opts.stderr_fd = out_pipe[1];
  else if (err == CapturedStderr::kDiscard) opts.stderr_fd = null_fd;
  StatusOr<Process> proc = Process::Spawn(opts);
  CloseFd(out_pipe[1]);  // the child holds its own copy: EOF once it (and its children) closed it
  CloseFd(null_fd);
  if (!proc.ok()) {
    CloseFd(out_pipe[0]);
    return proc.status();
  }
  CapturedRun run;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(out_pipe[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    run.out.append(buf, static_cast<size_t>(n));
  }
  CloseFd(out_pipe[0]);
  run.exit = proc->Wait().value_or(ExitStatus{});
  return run;
}

void StopAll(const std::vector<Process*>& procs, double grace_s) {
  for (Process* p : procs)
    if (p->running() && !p->Poll()) p->Signal(SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (true) {
    bool any = false;
    for (Process* p : procs) any = any || (p->running() && !p->Poll());
    if (!any || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (Process* p : procs) {
    // Leaders that obeyed SIGTERM may leave members that did not.
    p->Signal(SIGKILL);
    p->Wait();
  }
}

}  // namespace shard
