// Reads shardctl's job commands share: every metrics row (paged), the past
// events and the checkpoints of a job, through JobService.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardctl {

// Sets a call's deadline and credentials.
using PrepareCall = std::function<void(grpc::ClientContext*, std::chrono::milliseconds)>;

// Rank 0's rows in step order (last > 0: only the last `last`), asking on
// from the last step while the coordinator says more remain.
shard::StatusOr<std::vector<shardd::v1::MetricRow>> FetchMetricRows(shardd::v1::JobService::Stub* stub,
                                                                    const PrepareCall& prepare,
                                                                    const std::string& job_id, int64_t last);

// The job's events so far: WatchJob ends by itself for an ended job; for a
// running one the stream is cut after `live_wait` (past events come first).
shard::StatusOr<std::vector<shardd::v1::JobEvent>> FetchEvents(shardd::v1::JobService::Stub* stub,
                                                              const PrepareCall& prepare, const std::string& job_id,
                                                              std::chrono::milliseconds live_wait);

}  // namespace shardctl
