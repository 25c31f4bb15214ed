// Launches workers on this machine: fork/exec of shardd-worker per rank, each
// in its own process group (so a kill reaches anything the worker started),
// stdout and stderr into <log_dir>/rank_<r>.log, exits seen by waitpid.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "coordinator/launchers/launcher.h"
#include "shard/common/process.h"

namespace shardd {

class LocalLauncher : public Launcher {
 public:
  ~LocalLauncher() override;  // kills what is still running: no orphans
  const char* name() const override { return "local"; }
  StatusOr<std::vector<int>> Launch(const LaunchRequest& req) override;
  std::vector<RankExit> Poll() override;
  void Terminate(const std::string& job_id, int attempt, bool force) override;
  int Running(const std::string& job_id, int attempt) override;
  void Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) override;

 private:
  struct Proc {
    std::string job_id;
    int attempt = 0;
    int rank = 0;
    pid_t pid = 0;
    shard::Process proc;  // our child; not running for an adopted rank
    bool child = true;    // false: adopted, watched with kill(pid, 0)
    bool done = false;
    // Signals the rank's process group (ours or adopted: both lead one).
    void Signal(int sig);
  };
  std::vector<Proc> procs_;
};

}  // namespace shardd
