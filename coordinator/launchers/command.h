// Runs an external command (sbatch, scontrol, kubectl) and captures what it
// printed. Cluster launchers use it for every interaction with their cluster,
// so tests can put a recorded stand-in first on PATH, or name one directly.
//
// Thread-safety: RunCommand is safe to call from any thread.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardd {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal (timeout included)
  std::string out;     // stdout
  std::string err;     // stderr
  bool ok() const { return exit_code == 0; }
  // "sbatch exited with code 1: sbatch: error: invalid partition" — the first
  // line of stderr (or stdout) for error messages.
  std::string Explain(const std::string& what) const;
};

struct CommandOptions {
  std::string stdin_data;                  // written to the command's stdin, then closed
  std::map<std::string, std::string> env;  // added to (or replacing in) this process's environment
  std::string cwd;                         // "" = this process's
  double timeout_s = 60;                   // SIGKILL after this long
  size_t max_output_bytes = 16 << 20;      // per stream; the rest is dropped
};

// argv[0] is looked up on PATH. An error only when the command cannot be
// started at all (not found, fork failed) or ran past its timeout; a non-zero
// exit is a result.
shard::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, const CommandOptions& opts = {});

// Whether a cluster CLI runs here, for Launcher::CheckAvailable: runs argv
// (e.g. `sbatch --version`) at most once a minute and keeps the answer.
// Thread-safety: Check is thread-safe (submissions call it from RPC threads);
// callers meanwhile wait for the one check in flight.
class CommandCheck {
 public:
  // launcher and tool name the failure: "the slurm launcher cannot run sbatch here: ...".
  CommandCheck(std::string launcher, std::string tool, std::vector<std::string> argv)
      : launcher_(std::move(launcher)), tool_(std::move(tool)), argv_(std::move(argv)) {}
  shard::Status Check();

 private:
  std::string launcher_, tool_;
  std::vector<std::string> argv_;
  std::mutex mu_;
  shard::Status result_;                               // guarded by mu_
  std::chrono::steady_clock::time_point checked_{};    // guarded by mu_
};

// Quotes a word for a POSIX shell script: 'it'\''s'.
std::string ShellQuote(const std::string& word);

}  // namespace shardd
