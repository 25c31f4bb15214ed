// Launches workers on this machine: shardd-worker per rank, each in its own
// process group (so a kill reaches anything the worker started), stdout and
// stderr into <log_dir>/rank_<r>.log. One shard::RankGroup (the local
// supervisor's non-blocking half) per attempt; the JobManager decides what a
// rank's exit means, so nothing here stops the siblings by itself.
#pragma once

#include <string>
#include <vector>

#include "coordinator/launchers/launcher.h"
#include "shard/common/rank_group.h"

namespace shardd {

class LocalLauncher : public Launcher {
 public:
  ~LocalLauncher() override = default;  // each RankGroup kills what still runs: no orphans
  const char* name() const override { return "local"; }
  StatusOr<std::vector<int>> Launch(const LaunchRequest& req) override;
  std::vector<RankExit> Poll() override;
  void Terminate(const std::string& job_id, int attempt, bool force) override;
  int Running(const std::string& job_id, int attempt) override;
  void Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) override;

 private:
  struct Attempt {
    std::string job_id;
    int attempt = 0;
    shard::RankGroup ranks;  // children, or adopted pids after a restart
  };
  // The attempt's entry, created when missing.
  Attempt& Find(const std::string& job_id, int attempt);
  std::vector<Attempt> attempts_;
};

}  // namespace shardd
