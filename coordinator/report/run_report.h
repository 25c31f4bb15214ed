// The run report: one self-contained HTML page (inline CSS and SVG, no
// script, nothing fetched) written to <run dir>/report.html when a job ends
// and by `shardctl report JOB`: the final figures, the loss and throughput
// curves (plus lr, gradient norm and the loss scale when a scaler ran; a
// preference: job's rewards, reward accuracy and log-probs, and its last
// step's rewards/* as final figures; with eval: on held-out pairs, their
// rewards and reward accuracy at the evaluated steps and the last
// evaluation's eval/rewards/* as final figures), the
// restarts and checkpoint commits marked on them, the event timeline, the
// committed checkpoints and the plan the job was admitted with.
//
// The page also carries its data as JSON in
// <script type="application/json" id="report-data"> (the dashboard's job and
// metrics shapes, coordinator/server/dashboard_api.h, plus "final"), so tools
// and tests read the curves' points without scraping SVG.
//
// Pure functions over the coordinator's messages; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd {

struct RunReportInput {
  v1::JobStatus job;
  std::vector<v1::JobEvent> events;            // oldest first
  std::vector<v1::CheckpointInfo> checkpoints;
  std::vector<v1::MetricRow> rows;             // rank 0's per-step metrics, step order
  int64_t generated_unix_ms = 0;
};

// Points per curve at most (longer runs are averaged into buckets, as the
// dashboard's /metrics endpoint does).
inline constexpr int kReportMaxPoints = 2000;

std::string RunReportHtml(const RunReportInput& in, int max_points = kReportMaxPoints);

// The file name inside the run directory (<checkpoint.dir>/<name>/).
inline constexpr const char* kReportFileName = "report.html";

// Writes the page to `path` atomically (temp file, fsync, rename), creating
// its directory.
shard::Status WriteRunReport(const RunReportInput& in, const std::string& path);

}  // namespace shardd
