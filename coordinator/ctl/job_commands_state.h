// Private to shardctl's job commands (job_commands.cc: submit, run, watch,
// cancel and the command table; job_status_commands.cc: status, list, queue,
// logs, metrics): the parsed flags and the connection they share, and the
// text helpers both print with.
#pragma once

#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/ctl/dashboard_command.h"
#include "coordinator/ctl/job_commands.h"
#include "coordinator/ctl/job_queries.h"
#include "coordinator/ctl/report_command.h"
#include "coordinator/daemon/coordinator.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardctl {

namespace v1 = shardd::v1;

namespace jobcmd {

// Set by SIGINT while a command follows a job (watch, logs --follow).
extern std::atomic<bool> g_interrupted;

// --json output: one schema per object (json_schema.h).
std::string Json(const v1::JobStatus& js);
std::string Json(const v1::ListJobsResponse& resp);
std::string Json(const v1::ListCheckpointsResponse& resp);

// 42s, 3m05s, 2h10m; "?" for a negative (unknown) duration.
std::string Duration(double s);

// One line of a job's progress: step, loss, tokens/s, ETA, the last evaluation.
std::string ProgressLine(const std::string& id, const v1::Progress& p, int attempt);

}  // namespace jobcmd

struct JobCommands::State {
  ClientOptions client;
  CLI::App* run = nullptr;
  CLI::App* submit = nullptr;
  CLI::App* status = nullptr;
  CLI::App* list = nullptr;
  CLI::App* cancel = nullptr;
  CLI::App* watch = nullptr;
  CLI::App* logs = nullptr;
  CLI::App* metrics = nullptr;
  CLI::App* queue = nullptr;
  CLI::App* report = nullptr;
  CLI::App* dashboard = nullptr;
  ReportOptions report_opts;
  DashboardOptions dashboard_opts;
  std::string job_file, job_id, reason;
  std::vector<std::string> sets;
  bool json = false, all = false, follow = false, and_watch = false, all_ranks = false;
  int rank = 0, attempt = 0;
  int64_t last = 0, tail = 0;

  std::unique_ptr<v1::JobService::Stub> stub;
  std::unique_ptr<shardd::Coordinator> embedded;

  // allow_embed: `run` starts a coordinator here when none answers.
  // allow_offline: read-only commands read the state dir instead (said on stderr).
  shard::Status Connect(bool allow_embed, bool allow_offline = false);
  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout = std::chrono::seconds(30)) const {
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
    ctx->AddMetadata("authorization", "Bearer " + client.token);
  }
  PrepareCall Preparer() const {
    return [this](grpc::ClientContext* ctx, std::chrono::milliseconds timeout) { Prepare(ctx, timeout); };
  }
  shard::StatusOr<v1::JobStatus> Submit();
  shard::StatusOr<v1::JobStatus> Watch(const std::string& id, bool quiet_past, bool as_json = false);
  shard::Status Status();
  shard::Status List(bool queue = false);
  shard::Status Cancel();
  shard::Status Logs();
  shard::StatusOr<v1::GetLogsResponse> LogTail(int r);
  shard::Status AllRankLogs();
  shard::Status Metrics();
};

}  // namespace shardctl
