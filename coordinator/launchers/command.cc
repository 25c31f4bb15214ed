#include "coordinator/launchers/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "shard/common/process.h"

namespace shardd {
namespace {

// The three pipes of a command; whatever is still open is closed on scope exit.
struct Pipes {
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  ~Pipes() {
    for (int* fd : {&in[0], &in[1], &out[0], &out[1], &err[0], &err[1]}) Close(*fd);
  }
  static void Close(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Feeds stdin_data to the command and collects its stdout and stderr until
// both close. False when the deadline passed first.
bool Pump(Pipes& p, const CommandOptions& opts, CommandResult* r) {
  size_t written = 0;
  int& stdin_fd = p.in[1];
  if (opts.stdin_data.empty()) Pipes::Close(stdin_fd);
  else ::fcntl(stdin_fd, F_SETFL, O_NONBLOCK);
  int& out_fd = p.out[0];
  int& err_fd = p.err[0];
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opts.timeout_s * 1000));
  while (out_fd >= 0 || err_fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
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
        if (written >= opts.stdin_data.size()) Pipes::Close(stdin_fd);
        continue;
      }
      char buf[65536];
      const ssize_t k = ::read(fds[i].fd, buf, sizeof(buf));
      std::string& dst = fds[i].fd == out_fd ? r->out : r->err;
      if (k > 0) {
        if (dst.size() < opts.max_output_bytes)
          dst.append(buf, std::min<size_t>(static_cast<size_t>(k), opts.max_output_bytes - dst.size()));
      } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
        Pipes::Close(fds[i].fd == out_fd ? out_fd : err_fd);
      }
    }
  }
  return true;
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
  std::lock_guard<std::mutex> lock(mu_);
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
  Pipes p;
  if (::pipe2(p.in, O_CLOEXEC) != 0 || ::pipe2(p.out, O_CLOEXEC) != 0 || ::pipe2(p.err, O_CLOEXEC) != 0)
    return shard::Internal(std::string("pipe: ") + std::strerror(errno));
  shard::SpawnOptions so;
  so.argv = argv;
  so.env.set = opts.env;
  so.cwd = opts.cwd;
  so.stdin_fd = p.in[0];
  so.stdout_fd = p.out[1];
  so.stderr_fd = p.err[1];
  // Its own group, so a timeout also reaches what the command started.
  so.new_process_group = true;
  ASSIGN_OR_RETURN(shard::Process proc, shard::Process::Spawn(so));
  Pipes::Close(p.in[0]);
  Pipes::Close(p.out[1]);
  Pipes::Close(p.err[1]);
  CommandResult r;
  std::optional<shard::ExitStatus> e;
  // Its output closed: it has the same time again to exit.
  if (Pump(p, opts, &r)) e = proc.Wait(opts.timeout_s);
  if (!e) {
    proc.Signal(SIGKILL);
    proc.Wait();
    return shard::DeadlineExceeded(argv[0] + " did not finish within " + std::to_string(static_cast<int>(opts.timeout_s)) +
                                   " s");
  }
  proc.Signal(SIGKILL);  // anything it left behind in its group
  r.exit_code = e->signal == 0 ? e->code : -1;
  return r;
}

}  // namespace shardd
