// Launches workers on this machine: shardd-worker per rank, each in its own
// process group (so a kill reaches anything the worker started), stdout and
// stderr into <log_dir>/rank_<r>.log. One shard::RankGroup (the local
// supervisor's non-blocking half) per attempt; the JobManager decides what a
// rank's exit means, so nothing here stops the siblings by itself.
//
// Elastic restarts (restart.min_world_size): the job's devices come in the
// request's CUDA_VISIBLE_DEVICES (its placement, all of it at every size).
// Capacity counts those a fresh probe still sees (local_gpus.h); a launch of
// fewer ranks than devices runs rank r on the r-th device still there, by
// its ordinal now. CPU ranks have no placement limit: Capacity says so.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/launchers/launcher.h"
#include "coordinator/launchers/local/local_gpus.h"
#include "shard/common/rank_group.h"

namespace shardd {

class LocalLauncher : public Launcher {
 public:
  LocalLauncher() = default;
  // gpus: which of a job's GPUs are still here (null: no probe; Capacity is
  // then UNIMPLEMENTED and no launch is shrunk).
  explicit LocalLauncher(std::unique_ptr<LocalGpuWatch> gpus) : gpus_(std::move(gpus)) {}
  ~LocalLauncher() override = default;  // each RankGroup kills what still runs: no orphans
  const char* name() const override { return "local"; }
  StatusOr<std::vector<int>> Launch(const LaunchRequest& req) override;
  // The job's GPUs a fresh probe (rate-limited) still sees, req.world at most.
  StatusOr<int> Capacity(const LaunchRequest& req) override;
  bool SizesRestartsBeforeLaunch() const override { return true; }
  std::vector<RankExit> Poll() override;
  void Terminate(const std::string& job_id, int attempt, bool force) override;
  int Running(const std::string& job_id, int attempt) override;
  void Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) override;
  // A stopping shardd lets its workers go: they train on (not killed when
  // this launcher goes) for the next coordinator on the state dir to adopt.
  void Release();

 private:
  struct Attempt {
    std::string job_id;
    int attempt = 0;
    shard::RankGroup ranks;  // children, or adopted pids after a restart
  };
  // The attempt's entry, created when missing.
  Attempt& Find(const std::string& job_id, int attempt);
  // The job's devices: the request's CUDA_VISIBLE_DEVICES, else the last
  // launch's. Empty: CPU ranks. NotFound: never launched since the start.
  StatusOr<std::vector<int>> JobGpus(const LaunchRequest& req) const;
  std::vector<Attempt> attempts_;
  std::unique_ptr<LocalGpuWatch> gpus_;
  std::map<std::string, std::vector<int>> job_gpus_;  // job id -> its placement's devices
};

}  // namespace shardd
