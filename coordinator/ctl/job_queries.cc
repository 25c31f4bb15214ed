#include "coordinator/ctl/job_queries.h"

#include "proto/rpc/grpc_status.h"

namespace v1 = shardd::v1;
using namespace std::chrono_literals;

namespace shardctl {

shard::StatusOr<std::vector<v1::MetricRow>> FetchMetricRows(v1::JobService::Stub* stub, const PrepareCall& prepare,
                                                            const std::string& job_id, int64_t last) {
  v1::GetMetricsRequest req;
  req.set_job_id(job_id);
  req.set_limit(last);
  std::vector<v1::MetricRow> rows;
  while (true) {
    v1::GetMetricsResponse resp;
    grpc::ClientContext ctx;
    prepare(&ctx, 30s);
    grpc::Status gs = stub->GetMetrics(&ctx, req, &resp);
    if (gs.error_code() == grpc::StatusCode::UNIMPLEMENTED)
      return shard::Unimplemented("the coordinator predates `shardctl metrics`: upgrade shardd");
    RETURN_IF_ERROR(shardd::FromGrpc(gs, "metrics " + job_id));
    if (resp.truncated() && resp.rows().empty())
      return shard::Internal("metrics " + job_id + ": the coordinator returned no rows but more to come");
    for (auto& r : *resp.mutable_rows()) rows.push_back(std::move(r));
    if (last > 0 && static_cast<int64_t>(rows.size()) >= last) {
      rows.resize(last);  // rows trained while we paged
      break;
    }
    if (!resp.truncated()) break;
    req.set_after_step(rows.back().step());
    req.set_limit(0);
  }
  return rows;
}

shard::StatusOr<std::vector<v1::JobEvent>> FetchEvents(v1::JobService::Stub* stub, const PrepareCall& prepare,
                                                      const std::string& job_id, std::chrono::milliseconds live_wait) {
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  grpc::ClientContext ctx;
  prepare(&ctx, live_wait);
  auto reader = stub->WatchJob(&ctx, req);
  std::vector<v1::JobEvent> events;
  v1::JobEvent ev;
  while (reader->Read(&ev))
    if (ev.kind() != "progress") events.push_back(ev);
  grpc::Status st = reader->Finish();
  if (!st.ok() && st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) return shardd::FromGrpc(st, "events of " + job_id);
  return events;
}

}  // namespace shardctl
