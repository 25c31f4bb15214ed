// shardctl's read-only job commands: status, list (and queue), logs, metrics.
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "coordinator/ctl/job_commands_state.h"
#include "coordinator/ctl/log_view.h"
#include "coordinator/ctl/metrics_format.h"
#include "coordinator/ctl/queue_format.h"
#include "coordinator/jobs/job_manager.h"
#include "proto/rpc/grpc_status.h"

namespace shardctl {

using namespace std::chrono_literals;
using namespace jobcmd;

shard::Status JobCommands::State::Status() {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::JobStatus js;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  RETURN_IF_ERROR(shardd::FromGrpc(stub->GetJob(&ctx, req, &js), "status " + job_id));
  if (json) {
    std::printf("%s\n", Json(js).c_str());
    return shard::OkStatus();
  }
  std::printf("job        %s (%s)\nstate      %s%s%s\nattempt    %d (restarts %d of %d)\n", js.id().c_str(),
              js.name().c_str(), shardd::JobStateName(js.state()).c_str(), js.reason().empty() ? "" : ": ",
              js.reason().c_str(), js.attempt(), js.restarts(), js.max_restarts());
  if (js.attempt_world_size() > 0 && js.attempt_world_size() < js.world_size())
    std::printf("ranks      %d of %d (restart.min_world_size: an elastic attempt on fewer ranks)\n",
                js.attempt_world_size(), js.world_size());
  std::printf("launcher   %s%s\n", js.launcher().c_str(),
              js.progress().preemptions() > 0
                  ? (" (" + std::to_string(js.progress().preemptions()) + " preemption(s), not counted as restarts)").c_str()
                  : "");
  if (!js.join_token().empty() && !shardd::IsTerminal(js.state()))
    std::printf("join       SHARDD_WORKER_TOKEN=%s shardd-worker --coordinator ADDR --job %s  (one per rank; "
                "see deploy/slurm/external-job.sbatch)\n",
                js.join_token().c_str(), js.id().c_str());
  if (!js.placement().empty()) std::printf("placement  %s\n", js.placement().c_str());
  if (js.queue_position() > 0)
    std::printf("queue      position %d, priority %d, needs %s\n", js.queue_position(), js.priority(),
                js.demand().c_str());
  std::printf("progress   %s\n", ProgressLine(js.id(), js.progress(), js.attempt()).c_str());
  std::printf("committed  %s\ncheckpoints %s\nlogs       %s\n",
              js.progress().last_committed_step() < 0 ? "none"
                                                      : ("step " + std::to_string(js.progress().last_committed_step())).c_str(),
              js.checkpoint_dir().c_str(), js.job_dir().c_str());
  // The flight recorder's account of the last stall (docs/control-plane.md).
  if (!js.stall().text().empty())
    std::printf("stall      attempt %d (%s): %s\n", js.stall().attempt(), js.stall().trigger().c_str(),
                js.stall().text().c_str());
  for (const auto& w : js.workers()) {
    std::string where = w.hostname();
    if (!w.launcher_id().empty()) where += (where.empty() ? "" : ", ") + w.launcher_id();
    if (!w.devices().empty()) where += (where.empty() ? "" : ", ") + w.devices();
    // Straggler detection (docs/control-plane.md): its compute per step once a window is judged.
    char compute[64] = "";
    if (w.compute_seconds() > 0)
      std::snprintf(compute, sizeof compute, "  compute %.3g s/step%s", w.compute_seconds(),
                    w.straggler() ? " STRAGGLER" : "");
    std::printf("  rank %d  pid %d  %-10s step %lld  heartbeat %s ago%s%s%s%s%s\n", w.rank(), w.pid(),
                w.state().c_str(), static_cast<long long>(w.step()),
                w.last_heartbeat_age_s() < 0 ? "never" : Duration(w.last_heartbeat_age_s()).c_str(), compute,
                where.empty() ? "" : "  on ", where.c_str(), w.collective().empty() ? "" : "  collective ",
                w.collective().c_str());
  }
  return shard::OkStatus();
}

shard::Status JobCommands::State::List(bool queue) {
  v1::ListJobsRequest req;
  req.set_include_finished(all && !queue);
  v1::ListJobsResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  RETURN_IF_ERROR(shardd::FromGrpc(stub->ListJobs(&ctx, req, &resp), "list"));
  if (json) {
    std::printf("%s\n", Json(resp).c_str());
    return shard::OkStatus();
  }
  if (queue) {
    std::printf("%s", shardctl::QueueTable(resp).c_str());
    return shard::OkStatus();
  }
  std::printf("%-24s %-11s %-8s %-14s %s\n", "JOB", "STATE", "ATTEMPT", "STEP", "REASON");
  for (const auto& j : resp.jobs())
    std::printf("%-24s %-11s %-8d %-14s %s\n", j.id().c_str(), shardd::JobStateName(j.state()).c_str(), j.attempt(),
                (std::to_string(j.progress().step()) + "/" + std::to_string(j.progress().total_steps())).c_str(),
                j.reason().c_str());
  return shard::OkStatus();
}

// The end of rank r's log (up to 4 MiB: the most one call returns).
shard::StatusOr<v1::GetLogsResponse> JobCommands::State::LogTail(int r) {
  v1::GetLogsRequest req;
  req.set_job_id(job_id);
  req.set_rank(r);
  req.set_attempt(attempt);
  req.set_offset(-1);
  req.set_max_bytes(4 << 20);
  v1::GetLogsResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  RETURN_IF_ERROR(shardd::FromGrpc(stub->GetLogs(&ctx, req, &resp), "logs " + job_id));
  return resp;
}

shard::Status JobCommands::State::AllRankLogs() {
  if (follow) return shard::InvalidArgument("logs --all-ranks does not combine with --follow: follow one --rank");
  v1::GetJobRequest greq;
  greq.set_job_id(job_id);
  v1::JobStatus js;
  grpc::ClientContext gctx;
  Prepare(&gctx);
  RETURN_IF_ERROR(shardd::FromGrpc(stub->GetJob(&gctx, greq, &js), "logs " + job_id));
  std::vector<std::pair<int, std::string>> logs;
  for (int r = 0; r < js.world_size(); ++r) {
    ASSIGN_OR_RETURN(v1::GetLogsResponse resp, LogTail(r));
    logs.emplace_back(r, resp.data());
  }
  const std::string text = TailLines(MergeRankLogs(logs), tail);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return shard::OkStatus();
}

shard::Status JobCommands::State::Logs() {
  if (all_ranks) return AllRankLogs();
  int64_t offset = -1;
  if (tail > 0) {  // the last lines, then on from there with --follow
    ASSIGN_OR_RETURN(v1::GetLogsResponse resp, LogTail(rank));
    const std::string text = TailLines(resp.data(), tail);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (!follow) return shard::OkStatus();
    offset = resp.next_offset();
    attempt = resp.attempt();
  } else if (follow) {
    offset = 0;
  }
  while (true) {
    v1::GetLogsRequest req;
    req.set_job_id(job_id);
    req.set_rank(rank);
    req.set_attempt(attempt);
    req.set_offset(offset);
    req.set_max_bytes(follow ? 1 << 20 : 256 << 10);
    v1::GetLogsResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx);
    RETURN_IF_ERROR(shardd::FromGrpc(stub->GetLogs(&ctx, req, &resp), "logs " + job_id));
    std::fwrite(resp.data().data(), 1, resp.data().size(), stdout);
    std::fflush(stdout);
    offset = resp.next_offset();
    if (!follow || g_interrupted) return shard::OkStatus();
    if (resp.data().empty()) {
      if (resp.finished()) return shard::OkStatus();
      attempt = resp.attempt();  // stay on this attempt's file
      std::this_thread::sleep_for(500ms);
    }
  }
}

shard::Status JobCommands::State::Metrics() {
  ASSIGN_OR_RETURN(std::vector<v1::MetricRow> rows, FetchMetricRows(stub.get(), Preparer(), job_id, last));
  const std::string text = json ? MetricsJsonLines(rows) : MetricsTable(rows);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return shard::OkStatus();
}

}  // namespace shardctl
