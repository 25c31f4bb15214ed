// Writes each ended job's run report (coordinator/report/run_report.h) into
// its run directory, <checkpoint.dir>/<name>/report.html, from the
// JobManager's records: a thread looks for newly ended jobs every second;
// Flush() does one pass at once (the embedded coordinator of `shardctl run`
// calls it before stopping). A job's report is written once per coordinator
// process; a report already newer than the job's last change is kept (a
// restarted coordinator does not rewrite them all). A run directory that
// cannot take the file costs a warning, never the job.
//
// Thread-safety: Flush may be called from any thread; one pass runs at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "coordinator/jobs/job_manager.h"
#include "coordinator/report/run_report.h"

namespace shardd {

// Everything the report shows, read from the JobManager (metrics paged).
shard::StatusOr<RunReportInput> CollectRunReport(JobManager* jobs, const std::string& job_id);

class ReportWriter {
 public:
  explicit ReportWriter(JobManager* jobs, double interval_s = 1.0);
  ~ReportWriter();  // stops the thread (without a last pass: call Flush first)
  void Start();
  void Flush();

 private:
  void Pass();
  JobManager* jobs_;
  double interval_s_;
  std::mutex pass_mu_;            // one pass at a time
  std::set<std::string> done_;    // guarded by pass_mu_
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;             // guarded by mu_
  std::thread thread_;
};

}  // namespace shardd
