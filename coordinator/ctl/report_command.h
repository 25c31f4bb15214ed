// shardctl report JOB: (re)writes a job's run report
// (coordinator/report/run_report.h) from what the coordinator, or the state
// directory read offline, knows about it.
#pragma once

#include <string>

#include "coordinator/ctl/job_queries.h"

namespace shardctl {

struct ReportOptions {
  std::string job_id;
  std::string out;  // "": <run dir>/report.html, the run directory the coordinator names
  bool json = false;
};

shard::Status RunReport(shardd::v1::JobService::Stub* stub, const PrepareCall& prepare, const ReportOptions& o);

}  // namespace shardctl
