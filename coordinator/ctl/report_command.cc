#include "coordinator/ctl/report_command.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "coordinator/jobs/job_manager.h"
#include "coordinator/report/run_report.h"
#include "proto/rpc/grpc_status.h"

namespace v1 = shardd::v1;
using namespace std::chrono_literals;

namespace shardctl {

shard::Status RunReport(v1::JobService::Stub* stub, const PrepareCall& prepare, const ReportOptions& o) {
  std::error_code ec;
  if (!o.out.empty() && std::filesystem::is_directory(o.out, ec))
    return shard::InvalidArgument("--out " + o.out + " is a directory; the run report is one file (e.g. --out " +
                                  (std::filesystem::path(o.out) / shardd::kReportFileName).string() + ")");
  shardd::RunReportInput in;
  {
    v1::GetJobRequest req;
    req.set_job_id(o.job_id);
    grpc::ClientContext ctx;
    prepare(&ctx, 30s);
    RETURN_IF_ERROR(shardd::FromGrpc(stub->GetJob(&ctx, req, &in.job), "report " + o.job_id));
  }
  const bool ended = shardd::IsTerminal(in.job.state());
  ASSIGN_OR_RETURN(in.events, FetchEvents(stub, prepare, o.job_id, ended ? 60s : 2s));
  ASSIGN_OR_RETURN(in.rows, FetchMetricRows(stub, prepare, o.job_id, 0));
  {
    v1::ListCheckpointsRequest req;
    req.set_job_id(o.job_id);
    v1::ListCheckpointsResponse resp;
    grpc::ClientContext ctx;
    prepare(&ctx, 60s);
    RETURN_IF_ERROR(shardd::FromGrpc(stub->ListCheckpoints(&ctx, req, &resp), "checkpoints of " + o.job_id));
    in.checkpoints.assign(resp.checkpoints().begin(), resp.checkpoints().end());
  }
  in.generated_unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string path = o.out;
  if (path.empty()) {
    if (in.job.checkpoint_dir().empty())
      return shard::FailedPrecondition("job " + o.job_id + " names no run directory: give --out FILE");
    path = (std::filesystem::path(in.job.checkpoint_dir()) / shardd::kReportFileName).string();
  }
  RETURN_IF_ERROR(shardd::WriteRunReport(in, path));
  if (o.json) {
    nlohmann::json j = {{"job_id", o.job_id}, {"path", path}, {"state", shardd::JobStateName(in.job.state())},
                        {"steps", in.rows.size()}, {"events", in.events.size()}, {"checkpoints", in.checkpoints.size()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s%s\n", path.c_str(), ended ? "" : "  (the job is still running: a report of what there is so far)");
  }
  return shard::OkStatus();
}

}  // namespace shardctl
