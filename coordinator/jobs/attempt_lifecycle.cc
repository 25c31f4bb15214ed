// An attempt's state changes (attempt_lifecycle.h), under the job lock.
#include "coordinator/jobs/attempt_lifecycle.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "coordinator/jobs/job_manager_internal.h"
#include "coordinator/jobs/stall_explainer.h"
#include "coordinator/logs/rank_log.h"
#include "coordinator/state/auth.h"
#include "shard/common/logging.h"
#include "shard/spec/elastic_world.h"

namespace fs = std::filesystem;

namespace shardd {
namespace {

using internal::Fmt;

constexpr int kExitBadInput = 2;  // shardd-worker's code for a job that can never run

}  // namespace

std::string AttemptLifecycle::AttemptDir(const Job& j, int attempt) const {
  return (fs::path(opts_.state_dir) / "jobs" / j.id / ("attempt_" + std::to_string(attempt))).string();
}

bool AttemptLifecycle::Begin(Job& j, const std::string& resume, LaunchRequest* req, bool this_run_only) {
  // Fewer ranks after an elastic shrink (elastic_resize.h), else all of them.
  const int full = j.config.parallel.world_size;
  const int world = j.elastic.next_world > 0 && j.elastic.next_world < full ? j.elastic.next_world : full;
  // Which host each rank was on, for the next shrink's "host b lost".
  j.elastic.last_hosts.resize(full);
  for (size_t r = 0; r < j.ranks.size() && r < j.elastic.last_hosts.size(); ++r)
    if (j.ranks[r].registered && !j.ranks[r].hostname.empty()) j.elastic.last_hosts[r] = j.ranks[r].hostname;
  j.attempt += 1;
  j.previous_token_hash = j.token_hash;
  j.token = IsExternal(j) ? ExternalWorkerToken(j.join_token, j.attempt) : NewJobToken();
  j.token_hash = HashToken(j.token);
  j.step_seconds.clear();
  j.health.pending_failure.clear();
  j.queue_reason.clear();
  j.adopted = false;
  j.nothing_trained = false;
  j.health.straggler_restart.clear();
  // The job's progress restarts where this attempt resumes (the control
  // loop plans a newer per-host memory step after Begin).
  const int64_t resume_step = j.ckpt.BeginAttempt(resume, this_run_only);
  if (j.attempt > 1) j.progress.set_step(resume_step);
  const int64_t now = opts_.now_ms();
  j.attempt_began_ms = now;
  j.elastic.standby.clear();  // standby workers ask again, for this attempt
  j.elastic.capacity_ranks = -1;  // a launcher's count is of one attempt (elastic_launched.h)
  j.ranks.assign(world, JobRank{});
  for (JobRank& r : j.ranks) r.launched_ms = now;
  table_->SetState(j, v1::LAUNCHING, "launching",
                   std::to_string(world) + (world < full ? " of " + std::to_string(full) : std::string()) +
                       " worker(s), resume from " +
                       (j.ckpt.resume_from().empty() ? std::string("scratch") : j.ckpt.resume_from()));

  if (IsExternal(j)) {
    table_->Emit(j, "waiting_for_workers",
                 std::to_string(world) + " worker(s) may join: shardd-worker --coordinator " +
                     opts_.coordinator_address + " --job " + j.id +
                     " with SHARDD_WORKER_TOKEN set to the job's join token (shardctl status " + j.id +
                     " --json shows it)");
    return false;
  }
  req->job_id = j.id;
  req->attempt = j.attempt;
  req->world = world;
  req->workdir = j.spec.workdir();
  req->log_dir = AttemptDir(j, j.attempt);
  req->coordinator = opts_.coordinator_address;
  req->worker_bin = opts_.worker_bin;
  req->env["SHARDD_WORKER_TOKEN"] = j.token;
  if (!opts_.worker_tls_ca.empty()) req->env["SHARDD_TLS_CA"] = opts_.worker_tls_ca;
  if (!opts_.worker_tls_cert.empty()) {
    req->env["SHARDD_TLS_CERT"] = opts_.worker_tls_cert;
    req->env["SHARDD_TLS_KEY"] = opts_.worker_tls_key;
  }
  req->job_name = j.config.name;
  req->resources = j.config.resources;
  // A resized attempt in the launcher's shape at its size (Slurm: fewer nodes).
  if (world < full)
    if (auto at = shard::JobAtWorldSize(j.config, world); at.ok()) req->resources = at->resources;
  sched_->AddPlacementEnv(j, req);
  return true;
}

void AttemptLifecycle::FinishLaunch(const std::string& job_id, int attempt, const StatusOr<std::vector<int>>& pids) {
  auto it = table_->jobs().find(job_id);
  if (it == table_->jobs().end()) return;
  Job& j = *it->second;
  if (j.attempt != attempt) return;  // cannot happen while Tick is serial; fencing all the same
  if (!pids.ok()) {
    if (j.state != v1::LAUNCHING) return;  // cancelled or failed meanwhile: nothing started
    // A cluster that is briefly unreachable (Unavailable, a command timeout)
    // is worth another attempt; anything else (a bad partition, a refused
    // manifest) will fail the same way again.
    const auto code = pids.status().code();
    const bool transient = code == shard::StatusCode::kUnavailable || code == shard::StatusCode::kDeadlineExceeded;
    Fail(j, "launch failed: " + pids.status().ToString(), transient);
    return;
  }
  // Recorded even when the attempt already ended (a cancel during the
  // launch): a restarted coordinator then still finds and stops them.
  for (size_t r = 0; r < pids->size() && r < j.ranks.size(); ++r) {
    j.ranks[r].pid = (*pids)[r];
    Status st = table_->store()->PutWorker({j.id, j.attempt, static_cast<int>(r), (*pids)[r], "", "launched"});
    if (!st.ok()) LOG_ERROR("job {}: {}", j.id, st.ToString());
  }
}

void AttemptLifecycle::End(Job& j) {
  if (j.attempt == 0) return;
  if (j.launcher) {
    // External workers are not ours to signal: they hear "attempt over" on their next call.
    runner_->QueueTerminate(j, j.attempt, /*force=*/false);
    j.draining_attempt = j.attempt;
    j.kill_at_ms = opts_.now_ms() + static_cast<int64_t>(opts_.kill_grace_s * 1000);
  }
  v1::WorkerId id;
  id.set_job_id(j.id);
  id.set_attempt(j.attempt);
  rendezvous_->Drop(AttemptKvPrefix(id));
}

void AttemptLifecycle::Fail(Job& j, const std::string& reason, bool retryable) {
  End(j);
  const int max = j.config.restart.max_restarts;
  if (!retryable) {
    table_->SetState(j, v1::FAILED, "failed", reason + " (not retryable)");
    return;
  }
  if (j.restarts >= max) {
    table_->SetState(j, v1::FAILED, "failed",
                     "max_restarts (" + std::to_string(max) + ") exhausted; last failure: " + reason);
    return;
  }
  j.restarts += 1;
  j.next_launch_ms = opts_.now_ms() + static_cast<int64_t>(j.config.restart.backoff_s * 1000);
  table_->SetState(j, v1::RESTARTING, "restarting",
                   reason + "; restart " + std::to_string(j.restarts) + " of " + std::to_string(max) + " in " +
                       Fmt(j.config.restart.backoff_s, "%.1f") + " s from the newest committed checkpoint");
}

void AttemptLifecycle::Resize(Job& j, int world, const std::string& kind, const std::string& what) {
  End(j);
  j.elastic.next_world = world < j.config.parallel.world_size ? world : 0;
  j.elastic.standby.clear();
  j.next_launch_ms = opts_.now_ms();
  table_->SetState(j, v1::RESTARTING, kind, what);
}

void AttemptLifecycle::Preempt(Job& j, const std::string& reason) {
  End(j);
  j.progress.set_preemptions(j.progress.preemptions() + 1);
  j.next_launch_ms = opts_.now_ms() + static_cast<int64_t>(j.config.restart.backoff_s * 1000);
  table_->SetState(j, v1::RESTARTING, "preempted",
                   reason + "; preemption " + std::to_string(j.progress.preemptions()) +
                       " (restarts are not charged); the next attempt resumes from the newest committed checkpoint");
}

std::string AttemptLifecycle::CauseOfExit(const Job& j, const RankExit& e) const {
  const JobRank& r = j.ranks[e.rank];
  if (!r.error.empty()) return ": " + r.error;
  // A signal is not explained by what the rank logged before it.
  if (e.signal != 0 || e.exit_code <= 0) return "";
  const std::string line = LastErrorLineOfLog(opts_.state_dir, "jobs/" + j.id + "/attempt_" + std::to_string(e.attempt) +
                                                                   "/rank_" + std::to_string(e.rank) + ".log");
  return line.empty() ? "" : ": " + line;
}

void AttemptLifecycle::ApplyAllRanksExit(Job& j, const RankExit& e) {
  // The whole allocation ended (a Slurm job, a Kubernetes Job).
  const bool bad_input = e.signal == 0 && e.exit_code == kExitBadInput;
  bool all_done = true, all_stopped = true;
  for (JobRank& r : j.ranks) {
    all_done = all_done && r.done;
    all_stopped = all_stopped && (r.done || r.preempted);
    r.exited = true;
    if (r.done || r.preempted) r.state = r.done ? "exited" : "preempted";
  }
  if (all_done && e.signal == 0 && (e.exit_code == 0 || e.exit_code == -1)) return;
  if (all_stopped) {
    Preempt(j, "every rank checkpointed and stopped on its launcher's signal");
    return;
  }
  for (JobRank& r : j.ranks)
    if (!r.done && !r.preempted) r.state = "failed";
  std::string why = e.Describe();
  if (bad_input) why += " (bad input; see the rank logs in " + AttemptDir(j, j.attempt) + ")";
  Fail(j, why, !bad_input);
}

void AttemptLifecycle::ApplyExit(Job& j, const RankExit& e) {
  const bool bad_input = e.signal == 0 && e.exit_code == kExitBadInput;
  if (e.rank == RankExit::kAllRanks) {
    ApplyAllRanksExit(j, e);
    return;
  }
  if (e.rank < 0 || e.rank >= static_cast<int>(j.ranks.size())) return;
  JobRank& r = j.ranks[e.rank];
  r.exited = true;
  if (e.signal == 0 && (e.exit_code == 0 || e.exit_code == -1) && r.done) {
    r.state = "exited";  // (-1: adopted, gone after reporting done)
    return;
  }
  if (r.preempted) {
    r.state = "preempted";  // it said why it stopped; the attempt ends when every rank has
    return;
  }
  if (e.signal == 0 && e.exit_code == -1) {
    Fail(j, "rank " + std::to_string(e.rank) + " (adopted pid " + std::to_string(r.pid) + ") is gone", true);
    return;
  }
  r.state = "failed";
  std::string why = e.Describe();
  if (e.signal == 0 && e.exit_code == 0) why += " before reporting done";
  why += CauseOfExit(j, e);
  // A rank that exited after reporting its collective's timeout is one of
  // the waiters; any other exit is a death its peers may be waiting on.
  // (A bad input is the job's, not a stall.)
  if (!bad_input && IsCollectiveTimeout(r.error)) {
    ExplainStall(table_, j, StallTrigger::kCollectiveTimeout, opts_.now_ms());
  } else if (!bad_input) {
    ExplainStall(table_, j, StallTrigger::kRankDied, opts_.now_ms(), e.rank,
                 e.signal != 0 ? "was killed by signal " + std::to_string(e.signal) + " (" + strsignal(e.signal) + ")"
                               : "exited with code " + std::to_string(e.exit_code));
  }
  if (bad_input) why += " (bad input; see " + AttemptDir(j, j.attempt) + "/rank_" + std::to_string(e.rank) + ".log)";
  Fail(j, why, !bad_input);
}

}  // namespace shardd
