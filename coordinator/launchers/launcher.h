// Starts, watches and stops the workers of one attempt. Backends live in
// folders beside this file (local/, slurm/, kubernetes/), each behind this
// interface; the JobManager picks one by the job's resources.launcher and
// never knows which one it talks to.
//
// Thread-safety: implementations are called from the JobManager's thread only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/job_config.h"

namespace shardd {

using shard::Status;
using shard::StatusOr;

struct LaunchRequest {
  std::string job_id;
  int attempt = 0;
  int world = 1;
  std::string workdir;      // cwd of every worker (the submitter's directory)
  std::string log_dir;      // rank_<r>.log for each rank goes here
  std::string coordinator;  // address workers dial
  std::string worker_bin;   // path of shardd-worker
  std::map<std::string, std::string> env;  // extra environment (the attempt token)
  std::string job_name;                    // the job file's name (labels, Slurm job names)
  shard::ResourcesConfig resources;        // the job's resources section (slurm/kubernetes settings)
};

// The coordinator's own environment that no worker may inherit: its admin
// token, and its own TLS files (shardd's sbatch script, or a shell set up for
// shardctl, may hold them). Workers get only what LaunchRequest::env says.
// Launchers whose workers inherit the coordinator's environment (local,
// slurm) drop or blank these unless the request sets them.
inline constexpr const char* kCoordinatorOnlyEnv[] = {"SHARDD_TOKEN", "SHARDD_WORKER_TOKEN", "SHARDD_TLS_CA",
                                                      "SHARDD_TLS_CERT", "SHARDD_TLS_KEY"};

// How a launched rank ended. Cluster launchers see their allocation end as a
// whole (a Slurm job, a Kubernetes Job): they report rank = kAllRanks.
struct RankExit {
  static constexpr int kAllRanks = -1;
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int exit_code = 0;  // valid when signal == 0; -1 = unknown (adopted, or the cluster did not say)
  int signal = 0;     // the signal that killed it, or 0
  std::string detail; // the launcher's own words ("slurm job 42 PREEMPTED"); replaces Describe()'s text
  std::string Describe() const;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual const char* name() const = 0;
  // Whether jobs can be launched here now (e.g. sbatch or kubectl can run);
  // a submission for an unavailable launcher is refused with this error.
  virtual Status CheckAvailable() { return shard::OkStatus(); }
  // Starts every rank; returns their process ids (0 where unknown).
  virtual StatusOr<std::vector<int>> Launch(const LaunchRequest& req) = 0;
  // Ranks that ended since the last call.
  virtual std::vector<RankExit> Poll() = 0;
  // Signals every rank of the attempt still running: SIGTERM, or SIGKILL when force.
  virtual void Terminate(const std::string& job_id, int attempt, bool force) = 0;
  // True while the attempt waits for its allocation (a Slurm job PENDING in
  // the queue): its workers cannot register yet, so the JobManager starts
  // their registration deadline only once this turns false.
  virtual bool Pending(const std::string& job_id, int attempt) { return false; }
  // While Pending: why, in the cluster's words ("slurm job 42 PENDING
  // (Resources)"), or "" when not known. Shown as an event when it changes.
  virtual std::string PendingReason(const std::string& job_id, int attempt) { return ""; }
  // Elastic restarts (restart.min_world_size; coordinator/jobs/
  // elastic_launched.h): how many of the job's ranks, req.world at most,
  // could be placed now in the shape req.resources asks for (whole nodes of
  // its tasks), counting what req.attempt holds as free (it ends before a
  // resized attempt starts; 0: none). UNIMPLEMENTED where the launcher has no
  // honest count; an error when the cluster could not be asked.
  virtual StatusOr<int> Capacity(const LaunchRequest& req) {
    return shard::Unimplemented(std::string("the ") + name() + " launcher cannot count free places");
  }
  // True where Capacity can tell before a restart's launch that fewer ranks
  // fit (the local launcher: a GPU gone is seen before a rank fails on it):
  // the JobManager then sizes every elastic restart by it before launching.
  virtual bool SizesRestartsBeforeLaunch() const { return false; }
  // Ranks of the attempt not yet seen to end.
  virtual int Running(const std::string& job_id, int attempt) = 0;
  // After a coordinator restart: watch ranks started by a previous coordinator
  // (not our children, so only liveness can be seen, not exit codes). Cluster
  // launchers find their allocation again by its name (job id and attempt).
  virtual void Adopt(const std::string& job_id, int attempt, const std::vector<int>& pids) = 0;
};

}  // namespace shardd
