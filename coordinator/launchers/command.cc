#include "coordinator/launchers/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

extern "C" char** environ;

namespace shardd {
namespace {

void ClosePair(int fds[2]) {
  for (int i = 0; i < 2; ++i)
    if (fds[i] >= 0) ::close(fds[i]);
}

}  // namespace

std::string CommandResult::Explain(const std::string& what) const {
  std::string text = err.empty() ? out : err;
  const size_t nl = text.find('\n');
  if (nl != std::string::npos) text.resize(nl);
  std::string s = what + (exit_code < 0 ? " was killed" : " exited with code " + std::to_string(exit_code));
  return text.empty() ? s : s + ": " + text;
}

shard::Status CommandCheck::Check() {
  const auto now = std::chrono::steady_clock::now();
  if (checked_ != std::chrono::steady_clock::time_point{} && now - checked_ < std::chrono::minutes(1)) return result_;
  checked_ = now;
  CommandOptions co;
  co.timeout_s = 10;
  auto r = RunCommand(argv_, co);
  std::string what;
  for (const std::string& a : argv_) what += (what.empty() ? "" : " ") + a;
  if (!r.ok())
    result_ = shard::FailedPrecondition("the " + launcher_ + " launcher cannot run " + tool_ + " here: " +
                                        r.status().message());
  else if (!r->ok())
    result_ = shard::FailedPrecondition("the " + launcher_ + " launcher: " + r->Explain(what));
  else
    result_ = shard::OkStatus();
  return result_;
}

std::string ShellQuote(const std::string& word) {
  std::string q = "'";
  for (char c : word) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

shard::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, const CommandOptions& opts) {
  if (argv.empty()) return shard::InvalidArgument("RunCommand: no command");
  // Everything exec needs is built before fork: the child only calls
  // async-signal-safe functions (this process has other threads).
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    const std::string name = eq ? std::string(*e, eq - *e) : std::string(*e);
    if (!opts.env.count(name)) env_store.push_back(*e);
  }
  for (const auto& [k, v] : opts.env) env_store.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    ClosePair(in);
    ClosePair(out);
    ClosePair(err);
    return shard::Internal(std::string("pipe: ") + std::strerror(errno));
  }
  // exec failure is reported through this pipe (closed by a successful exec).
  int status_pipe[2] = {-1, -1};
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    ClosePair(in);
    ClosePair(out);
    ClosePair(err);
    return shard::Internal(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ClosePair(in);
    ClosePair(out);
    ClosePair(err);
    ClosePair(status_pipe);
    return shard::Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    if (!opts.cwd.empty() && ::chdir(opts.cwd.c_str()) != 0) {
      int e = errno;
      (void)!::write(status_pipe[1], &e, sizeof(e));
      ::_exit(127);
    }
    ::execvpe(args[0], args.data(), envp.data());
    int e = errno;
    (void)!::write(status_pipe[1], &e, sizeof(e));
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::close(status_pipe[1]);
  int exec_errno = 0;
  const ssize_t got = ::read(status_pipe[0], &exec_errno, sizeof(exec_errno));
  ::close(status_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    ::waitpid(pid, nullptr, 0);
    return shard::NotFound("cannot run " + argv[0] + ": " + std::strerror(exec_errno));
  }

  CommandResult r;
  size_t written = 0;
  int stdin_fd = in[1];
  if (opts.stdin_data.empty()) {
    ::close(stdin_fd);
    stdin_fd = -1;
  } else {
    ::fcntl(stdin_fd, F_SETFL, O_NONBLOCK);
  }
  int out_fd = out[0], err_fd = err[0];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opts.timeout_s * 1000));
  bool timed_out = false;
  while (out_fd >= 0 || err_fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[3];
    int n = 0;
    if (out_fd >= 0) fds[n++] = {out_fd, POLLIN, 0};
    if (err_fd >= 0) fds[n++] = {err_fd, POLLIN, 0};
    if (stdin_fd >= 0) fds[n++] = {stdin_fd, POLLOUT, 0};
    const int rc = ::poll(fds, n, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (!fds[i].revents) continue;
      if (fds[i].fd == stdin_fd) {
        const ssize_t w = ::write(stdin_fd, opts.stdin_data.data() + written, opts.stdin_data.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) written = opts.stdin_data.size();  // the reader went away
        if (written >= opts.stdin_data.size()) {
          ::close(stdin_fd);
          stdin_fd = -1;
        }
        continue;
      }
      char buf[65536];
      const ssize_t k = ::read(fds[i].fd, buf, sizeof(buf));
      std::string& dst = fds[i].fd == out_fd ? r.out : r.err;
      if (k > 0) {
        if (dst.size() < opts.max_output_bytes)
          dst.append(buf, std::min<size_t>(static_cast<size_t>(k), opts.max_output_bytes - dst.size()));
      } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
        if (fds[i].fd == out_fd) {
          ::close(out_fd);
          out_fd = -1;
        } else {
          ::close(err_fd);
          err_fd = -1;
        }
      }
    }
  }
  if (stdin_fd >= 0) ::close(stdin_fd);
  if (out_fd >= 0) ::close(out_fd);
  if (err_fd >= 0) ::close(err_fd);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return shard::DeadlineExceeded(argv[0] + " did not finish within " + std::to_string(static_cast<int>(opts.timeout_s)) +
                                   " s");
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace shardd
