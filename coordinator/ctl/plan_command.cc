// shardctl plan FILE.yaml [--set k=v]... [--cluster NAME] [--simulate] [--json]
#include "coordinator/ctl/plan_command.h"

#include <cstdio>

#include "coordinator/daemon/coordinator.h"
#include "coordinator/host/probed_cluster.h"
#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "shard/sim/sim_report.h"
#include "shard/spec/job_config.h"

namespace shardctl {

shard::Status RunPlan(const PlanOptions& o, bool* printed) {
  *printed = false;
  ASSIGN_OR_RETURN(shard::JobConfig job, shard::LoadJobConfig(o.job_file, o.sets));
  ASSIGN_OR_RETURN(shard::plan::HardwareCatalog catalog, shard::plan::LoadDefaultHardwareCatalog());
  const std::string cluster = o.cluster.empty() ? job.resources.cluster : o.cluster;
  // Without a named cluster, GPU jobs are planned for the GPUs this host has.
  std::string no_gpu;
  auto probed = cluster.empty() ? shardd::ProbedLocalCluster(catalog, shardd::FindWorkerBinary(), &no_gpu) : std::nullopt;
  auto planned = shard::plan::PlanJob(job, catalog, cluster, probed ? &*probed : nullptr);
  // Any planning error ends here: dereferencing a failed StatusOr is what made
  // `plan --cluster` crash in FormatPlanText on a refused config.json (issue 21).
  if (!planned.ok())
    return no_gpu.empty() ? planned.status()
                          : planned.status().WithContext("no local GPU to plan for (" + no_gpu + ")");
  shard::plan::Plan plan = std::move(*planned);
  std::string text = o.json ? shard::plan::PlanToJson(plan) + "\n" : shard::plan::FormatPlanText(plan);
  if (o.simulate) {
    // The real trainer at the job's shapes on a backend that holds no data (shard/sim).
    ASSIGN_OR_RETURN(shard::sim::SimComparison sim, shard::sim::SimulatePlannedJob(job, plan));
    text = o.json ? shard::sim::PlanWithSimulationJson(plan, sim) + "\n" : text + shard::sim::FormatSimulationText(sim);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  *printed = true;
  // A verdict, not bad input: the job is well formed and needs more than the cluster has (exit 1).
  if (!plan.ok()) return shard::ResourceExhausted(o.job_file + ": " + shard::plan::PlanSummary(plan));
  return shard::OkStatus();
}

}  // namespace shardctl
