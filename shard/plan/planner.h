// The planner: will this job fit, how fast will it run, and what should change?
//
// PlanJob maps a job file (model from its preset or its HF config.json alone —
// no weights, no data are read) onto a cluster from the hardware catalog, runs
// the memory model (memory_model.h) and the step-time model (step_time.h),
// gives a verdict with its reasons, and ranks changes that would fit or run
// faster, each with its numbers and the --set overrides that make it.
//
// The coordinator runs the same PlanJob on every submission and refuses a job
// whose verdict is kDoesNotFit or kCannotRun, quoting the reasons.
//
// Thread-safety: pure functions of their arguments (PlanJob reads config.json
// for model.from_hf).
#pragma once

#include <string>
#include <vector>

#include "shard/plan/checkpoint_cost.h"
#include "shard/plan/hardware.h"
#include "shard/plan/memory_model.h"
#include "shard/plan/preference_cost.h"
#include "shard/plan/step_time.h"
#include "shard/plan/workload.h"
#include "shard/spec/job_config.h"

namespace shard::plan {

enum class Verdict {
  kFits,        // with headroom
  kTight,       // fits, but above 90% of device memory
  kDoesNotFit,  // device or host memory exceeded
  kCannotRun,   // not a memory question: unsupported precision, too few GPUs, ...
};
const char* VerdictName(Verdict v);

struct Recommendation {
  std::string change;             // "enable activation checkpointing + offload the optimizer"
  std::vector<std::string> sets;  // job-file overrides: "parallel.activation_checkpointing=true"
  std::string cluster;            // other hardware, when the advice is to move
  bool supported = true;          // false: shardd cannot train this way yet (LoRA/QLoRA)
  Verdict verdict = Verdict::kFits;
  int64_t device_bytes = 0;  // per GPU
  int64_t host_bytes = 0;    // per node
  double tokens_per_s = 0;
  double mfu = 0;
  std::string note;
};

struct Plan {
  Workload workload;
  ClusterSpec cluster;
  MemoryEstimate memory;
  StepTime time;
  CheckpointCost checkpoint;
  ReferenceCost reference;  // dpo/ipo (workload.reference_pairs >= 0); zero otherwise
  Verdict verdict = Verdict::kFits;
  std::vector<std::string> reasons;  // why it does not fit or cannot run
  std::vector<std::string> notes;    // assumptions and warnings that do not block
  std::vector<Recommendation> recommendations;
  std::string job_file;              // for the commands in recommendations

  bool ok() const { return verdict == Verdict::kFits || verdict == Verdict::kTight; }
  double device_capacity_bytes() const;  // per GPU (CPU engine: host RAM less the reserve, per rank)
  double host_capacity_bytes() const;    // per node, less the OS reserve
};

// A job as a Workload on `cluster`: resolves the model, precision "auto"
// (bf16 where the GPU has it, else fp16 with loss scaling; fp32 on the CPU
// engine). Problems that make the job impossible go to `reasons`.
struct JobWorkload {
  Workload workload;
  std::vector<std::string> reasons;
  std::vector<std::string> notes;
};
StatusOr<JobWorkload> WorkloadFromJob(const JobConfig& job, const ClusterSpec& cluster);

// Which hardware a job is planned for: `cluster_name` from the catalog; without
// one, the local host for resources.device cpu or auto (the CPU engine; this
// build has no GPU backend), and an error listing the clusters for cuda.
// `probed` (may be null): the GPUs this host's probe saw, used for device
// cuda or auto when no cluster is named.
StatusOr<ClusterSpec> ClusterForJob(const JobConfig& job, const HardwareCatalog& catalog,
                                    const std::string& cluster_name, const ClusterSpec* probed = nullptr);

// Memory, time and verdict of one workload (no recommendations).
Plan PlanWorkload(const Workload& w, const ClusterSpec& cluster);

// The whole plan of a job file on a cluster, with ranked recommendations.
StatusOr<Plan> PlanJob(const JobConfig& job, const HardwareCatalog& catalog, const std::string& cluster_name,
                       const ClusterSpec* probed = nullptr);

// Ranked changes for a plan (recommend.cc): when it does not fit, what would
// (activation checkpointing, optimizer offload, smaller micro-batch, another
// precision, full_shard, more GPUs or another cluster, LoRA/QLoRA); when it
// fits, changes that would run faster and still fit.
std::vector<Recommendation> Recommend(const Plan& plan, const HardwareCatalog& catalog);

}  // namespace shard::plan
