// `shardctl dashboard [JOB] [--url URL]`: prints a one-time login link for the
// web dashboard. It asks the coordinator's HTTP side for a nonce with the
// admin token (POST /api/login-link); the link logs a browser in once, within
// two minutes, and opens JOB's page when one is given. The token itself never
// goes into a URL.
#pragma once

#include <string>

#include "coordinator/ctl/job_commands.h"
#include "shard/common/status.h"

namespace shardctl {

struct DashboardOptions {
  std::string url = "http://127.0.0.1:7080/";  // what shardd printed as "dashboard http://..."
  std::string job;                              // open this job's page ("" = the job list)
};

// The link for `url` and `job` from the server's answer path ("/login?nonce=N").
std::string DashboardLink(const std::string& url, const std::string& path, const std::string& job);

// Resolves the token like the job commands (--token, $SHARDD_TOKEN, <state dir>/admin.token),
// asks for a nonce and prints the link on stdout.
shard::Status RunDashboard(const ClientOptions& client, const DashboardOptions& opts);

}  // namespace shardctl
