// Submission (job_submission.h): validation, admission and cancel.
#include "coordinator/jobs/job_submission.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "coordinator/host/probed_cluster.h"
#include "coordinator/jobs/job_manager_internal.h"
#include "coordinator/jobs/job_paths.h"
#include "coordinator/sched/host_capacity.h"
#include "shard/common/format_number.h"
#include "shard/common/owned_dir.h"
#include "shard/plan/hardware.h"
#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "shard/spec/llama_config.h"

namespace fs = std::filesystem;

namespace shardd {

using internal::Resolve;

Status JobSubmission::ValidateSpec(const v1::JobSpec& spec, shard::JobConfig* config, std::string* plan_summary,
                                double* mfu_per_position_s, int64_t* host_bytes) {
  const std::string src = spec.source_path().empty() ? "job.yaml" : spec.source_path();
  if (spec.yaml().size() > opts_.max_spec_bytes)
    return shard::InvalidArgument(src + ": the job file is " + std::to_string(spec.yaml().size()) +
                                  " bytes; the limit is " + std::to_string(opts_.max_spec_bytes));
  if (spec.workdir().empty() || !fs::path(spec.workdir()).is_absolute())
    return shard::InvalidArgument("job spec: workdir must be an absolute directory, got '" + spec.workdir() + "'");
  if (!fs::is_directory(spec.workdir()))
    return shard::NotFound("job spec: workdir " + spec.workdir() + " does not exist");
  std::vector<std::string> overrides(spec.overrides().begin(), spec.overrides().end());
  ASSIGN_OR_RETURN(*config, shard::ParseJobConfig(spec.yaml(), src, overrides));
  const shard::JobConfig& c = *config;
  // An elastic wait longer than a rank may take to register never ends in a
  // smaller world: the missing rank fails the attempt first.
  if (c.restart.min_world_size > 0 && c.restart.elastic_wait_s > opts_.register_timeout_s)
    return shard::InvalidArgument(src + ": restart.elastic_wait_s " + shard::BoundedNumber(c.restart.elastic_wait_s) +
                                  " s is longer than this coordinator's registration timeout " +
                                  shard::BoundedNumber(opts_.register_timeout_s) +
                                  " s: a rank that never registers fails the attempt before the wait ends, so the job "
                                  "never shrinks; use at most that");
  // The job's name was checked by the parser (shard::CheckPlainName, the rule
  // every entry point shares).
  const std::string launcher = shard::LauncherName(c.resources.launcher);
  if (c.resources.launcher != shard::Launcher::kExternal && !runner_->Find(launcher)) {
    std::string have;
    for (const auto& [name, l] : runner_->launchers()) have += (have.empty() ? "" : ", ") + name;
    return shard::Unimplemented(src + ": resources.launcher '" + launcher +
                                "' is not available in this coordinator (it has: " + have + ", external)");
  }
  if (c.resources.launcher != shard::Launcher::kExternal)
    if (Status st = runner_->Find(launcher)->CheckAvailable(); !st.ok())
      return Status(st.code(), src + ": resources.launcher " + launcher + ": " + st.message());
  const std::vector<JobPath> paths = JobPaths(c, spec.workdir());
  RETURN_IF_ERROR(CheckConfined(src, spec.workdir(), paths, opts_.allowed_roots));
  for (const JobPath& p : paths)
    if (p.must_exist && !fs::exists(p.path)) return shard::NotFound(src + ": " + p.key + ": " + p.path + " does not exist");
  // The memory tier's root, where the local launcher's ranks (all on this
  // host, this user) will write it: a folder they can own and create files
  // in, or none at all (/dev/null, a file, another user's folder). Elsewhere
  // a host that cannot write it skips its memory steps (events), not the run.
  if (c.checkpoint.memory.enabled() && c.resources.launcher == shard::Launcher::kLocal) {
    const std::string root = c.checkpoint.memory.dir.empty() ? shard::DefaultMemoryTierRoot() : c.checkpoint.memory.dir;
    if (Status st = shard::CheckOwnableDir(root); !st.ok())
      return Status(st.code(), src + ": checkpoint.memory.dir: " + st.message());
  }
  // The model's config.json, read where the workers will read it: sizes past
  // sane bounds (num_hidden_layers: 10000000) are an error here, not a
  // bad_alloc in the planner or a failed attempt later.
  if (!c.model.from_hf.empty()) {
    auto model = shard::LlamaConfigFromHfDir(Resolve(spec.workdir(), c.model.from_hf));
    if (!model.ok() && model.status().code() != shard::StatusCode::kNotFound)
      return Status(model.status().code(), src + ": model.from_hf: " + model.status().message());
  }
  // The planner's verdict: a job that cannot fit is refused with its reasons.
  auto catalog = shard::plan::LoadDefaultHardwareCatalog();
  if (catalog.ok()) {
    std::string no_gpu;
    auto probed = ProbedLocalCluster(*catalog, opts_.worker_bin, &no_gpu);
    // The planner reads model.from_hf's config.json: where the workers will,
    // relative to the submitter's directory, not this daemon's cwd.
    shard::JobConfig resolved = c;
    if (!c.model.from_hf.empty()) resolved.model.from_hf = Resolve(spec.workdir(), c.model.from_hf);
    auto plan = shard::plan::PlanJob(resolved, *catalog, c.resources.cluster, probed ? &*probed : nullptr);
    if (plan.ok() && !plan->ok())
      return shard::FailedPrecondition(src + ": the planner says this job cannot run: " +
                                       shard::plan::PlanSummary(*plan) + " (shardctl plan " + src + " for advice)");
    *plan_summary = plan.ok() ? shard::plan::PlanSummary(*plan) : "plan skipped: " + plan.status().message();
    // The host memory the local scheduler counts: the node's host bytes, and
    // on the CPU engine every rank's "device" bytes live in host RAM too.
    if (plan.ok())
      *host_bytes = plan->memory.host_total +
                    (plan->cluster.cpu_only ? plan->memory.device_total * c.parallel.world_size : 0);
    if (plan.ok() && !plan->cluster.cpu_only && plan->time.peak_tflops > 0)
      *mfu_per_position_s = plan->time.model_flops_per_token /
                            (c.parallel.world_size * plan->time.peak_tflops * 1e12);
  } else {
    *plan_summary = "plan skipped: " + catalog.status().message();
  }
  return shard::OkStatus();
}

Status JobSubmission::CheckNameFree(const v1::JobSpec& spec, const shard::JobConfig& c) {
  const std::string src = spec.source_path().empty() ? "job.yaml" : spec.source_path();
  for (const auto& [id, other] : table_->jobs()) {
    if (IsActive(*other) && other->config.name == c.name &&
        CheckpointDirOf(*other) == shard::CheckpointJobDir(c, spec.workdir()))
      return shard::FailedPrecondition(src + ": job " + other->id + " named '" + c.name +
                                       "' is still active and would share its checkpoint directory; cancel it or "
                                       "rename this job");
  }
  return shard::OkStatus();
}

StatusOr<v1::JobStatus> JobSubmission::Submit(const v1::JobSpec& spec) {
  if (opts_.read_only) return shard::FailedPrecondition(internal::kReadOnly);
  // Validation may take a while (the planner, a launcher's availability
  // check runs sbatch --version): not under the job lock.
  shard::JobConfig config;
  std::string plan;
  double mfu_per_position_s = 0;
  int64_t host_bytes = 0;
  RETURN_IF_ERROR(ValidateSpec(spec, &config, &plan, &mfu_per_position_s, &host_bytes));
  // The local host's capacity is fixed at start: read without the job lock.
  ASSIGN_OR_RETURN(std::optional<sched::Demand> demand,
                   sched_->DemandFor(config, host_bytes,
                                     spec.source_path().empty() ? std::string("job.yaml") : spec.source_path()));
  auto lock = table_->Lock();
  RETURN_IF_ERROR(CheckNameFree(spec, config));
  auto j = std::make_unique<Job>();
  j->id = table_->NewJobId(config.name);
  j->name = config.name;
  j->spec = spec;
  j->config = config;
  j->created_ms = opts_.now_ms();
  j->progress.set_total_steps(config.train.steps);
  j->progress.set_eta_s(-1);
  j->progress.set_last_committed_step(-1);
  j->progress.set_mfu(-1);
  j->mfu_per_position_s = mfu_per_position_s;
  j->ckpt.Init(config.checkpoint.keep_last, config.checkpoint.memory.keep_last);
  j->placement.demand = demand;
  if (IsExternal(*j)) j->join_token = NewJobToken();
  else j->launcher = runner_->Find(shard::LauncherName(config.resources.launcher));
  Job& ref = table_->Insert(std::move(j));
  sched_->StoreResources(ref);
  table_->SetState(ref, v1::QUEUED, "submitted",
                 (spec.source_path().empty() ? std::string("job") : spec.source_path()) + ", " +
                     std::to_string(config.parallel.world_size) + " worker(s), " +
                     std::to_string(config.train.steps) + " steps; " + plan);
  return table_->StatusOf(ref);
}

StatusOr<v1::JobStatus> JobSubmission::Cancel(const std::string& job_id, const std::string& reason) {
  v1::JobStatus status;
  {
    auto lock = table_->Lock();
    ASSIGN_OR_RETURN(Job * j, table_->Find(job_id));
    if (!IsActive(*j)) return table_->StatusOf(*j);  // idempotent
    if (opts_.read_only) return shard::FailedPrecondition(internal::kReadOnly);
    // A launch in flight for this job sees CANCELLED when it returns and its
    // workers get the Terminate queued here (RunLaunch): the cancel wins.
    attempts_->End(*j);
    table_->SetState(*j, v1::CANCELLED, "cancelled", reason.empty() ? "cancelled by the user" : reason);
    status = table_->StatusOf(*j);
  }
  runner_->TryRunTerminates();
  return status;
}

}  // namespace shardd
