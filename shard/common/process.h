// Child processes: spawn, supervise, stop. The one place in shardd that
// forks (the local launcher, the cluster-CLI command runner, `shardctl launch`
// and the worker's --nproc-per-node mode all use it).
//
// Everything the child needs (argv, the environment, the resolved executable,
// the log file) is built before fork: callers have other threads (gRPC, the
// thread pool), so between fork and exec the child only makes async-signal-
// safe calls — no allocation, no setenv, no locks.
//
// A child normally leads its own process group, so Signal/Stop reach whatever
// it started in turn (a shell's children, a worker's probe). With
// die_with_parent the kernel kills the child when the thread that spawned it
// exits (PR_SET_PDEATHSIG): spawn from a thread that lives as long as the
// supervisor (the main thread), or the child dies early.
//
// Thread-safety: a Process is used by one thread at a time; Spawn may be
// called from any thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shard {

// How a child ended.
struct ExitStatus {
  int code = -1;   // exit code when signal == 0
  int signal = 0;  // the signal that killed it, or 0
  bool ok() const { return signal == 0 && code == 0; }
  // "exited with code 3", "was killed by signal 9 (Killed)".
  std::string Describe() const;
  static ExitStatus FromWait(int wait_status);
};

struct EnvOptions {
  bool inherit = true;                            // start from this process's environment
  std::vector<std::string> unset;                 // inherited names dropped
  std::map<std::string, std::string> set;         // added, replacing an inherited value
  std::map<std::string, std::string> defaults;    // added only when neither inherited nor set
};

// NAME=VALUE strings for execve, each name once (set wins over inherited).
std::vector<std::string> BuildEnvironment(const EnvOptions& opts);

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is a path, or a name looked up on PATH
  EnvOptions env;
  std::string cwd;                // "" = this process's
  // stdout and stderr appended to this file (created 0644, never through a
  // symlink). "" = use the fds below.
  std::string log_path;
  int stdin_fd = -1;              // -1 = /dev/null
  int stdout_fd = -1;             // -1 = inherit (when log_path is "")
  int stderr_fd = -1;
  bool new_process_group = true;  // the child leads its own group
  // Killed with die_signal when the spawning thread exits (see above).
  bool die_with_parent = false;
  int die_signal = 9;             // SIGKILL
};

class Process {
 public:
  // Starts the child. Errors: argv empty, the program not found or not
  // executable (checked before fork, and exec's own errno after), the log
  // file or cwd unusable, fork failed.
  static StatusOr<Process> Spawn(const SpawnOptions& opts);

  Process() = default;
  Process(Process&& o) noexcept { *this = std::move(o); }
  Process& operator=(Process&& o) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  // A child still running is SIGKILLed (with its group) and reaped: no orphans.
  ~Process();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exit_; }
  // Non-blocking: the exit once the child ended (reaped here), else nullopt.
  std::optional<ExitStatus> Poll();
  // Blocks until the child ends, at most timeout_s (< 0: forever).
  std::optional<ExitStatus> Wait(double timeout_s = -1);
  // Sends sig to the child's group (or to the child alone without one). Also
  // after the child was reaped while its group lives on (grandchildren): a
  // group id is not reused while any member remains.
  void Signal(int sig);
  // SIGTERM to the group, then SIGKILL to the group after grace_s; returns
  // how the child ended. Whatever is left in its group gets SIGKILL too.
  ExitStatus Stop(double grace_s);
  // Lets the child go: it runs on, unwatched, and is neither killed nor
  // reaped by this object (init reaps it once this process exits). Returns its pid.
  pid_t Release();

 private:
  pid_t pid_ = -1;
  bool group_ = false;
  std::optional<ExitStatus> exit_;
};

// Stops several children together: SIGTERM to every running one, then SIGKILL
// to those still running after grace_s. Returns when all have ended.
void StopAll(const std::vector<Process*>& procs, double grace_s);

// What a child wrote to stdout, and how it ended.
struct CapturedRun {
  ExitStatus exit;
  std::string out;
};
enum class CapturedStderr { kInherit, kDiscard, kMerge /* into `out`, like 2>&1 */ };

// Runs a child to its end with its stdout read through a pipe (no shell, no
// popen): the child's own log_path/stdout_fd are replaced. Blocks until the
// child closed its stdout and ended. Errors: those of Spawn, or the pipe.
StatusOr<CapturedRun> RunCapturingStdout(SpawnOptions opts, CapturedStderr err = CapturedStderr::kInherit);

// The executable argv0 names: itself when it holds a '/', else the first
// executable match on PATH. NotFound otherwise.
StatusOr<std::string> FindExecutable(const std::string& argv0);

}  // namespace shard
