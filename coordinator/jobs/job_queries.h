// The read side of the job table: status and lists, committed checkpoints,
// per-step metrics (read from the store without the job lock, so heartbeats
// keep flowing), rank logs, stored events and watches, and telemetry.
//
// Thread-safety: every method is thread-safe (takes the table's lock where it
// reads a job). Watch sinks are called with the lock held and must not call back in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/jobs/job_table.h"
#include "coordinator/telemetry/telemetry.h"

namespace shardd {

class JobQueries {
 public:
  using EventSink = JobTable::EventSink;
  static constexpr int kMaxMetricRows = 100000;

  JobQueries(const JobManagerOptions& opts, JobTable* table) : opts_(opts), table_(table) {}

  StatusOr<v1::JobStatus> Get(const std::string& job_id);
  std::vector<v1::JobStatus> List(bool include_finished);
  std::vector<JobTelemetry> Telemetry(int64_t finished_grace_ms);
  StatusOr<std::vector<v1::CheckpointInfo>> Checkpoints(const std::string& job_id);
  StatusOr<v1::GetMetricsResponse> Metrics(const std::string& job_id, int64_t after_step, int64_t last,
                                           int64_t max_bytes);
  StatusOr<LogChunk> Logs(const std::string& job_id, int rank, int attempt, int64_t offset, int max_bytes);
  StatusOr<int64_t> Watch(const std::string& job_id, int64_t after_seq, EventSink sink,
                          std::vector<v1::JobEvent>* past);
  void Unwatch(int64_t watch_id);
  StatusOr<std::vector<v1::JobEvent>> Events(const std::string& job_id, int64_t after_seq);
  bool Drained(const std::string& job_id);

 private:
  const JobManagerOptions& opts_;
  JobTable* table_;
};

}  // namespace shardd
