#include "coordinator/ctl/dashboard_command.h"

#include <httplib.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "coordinator/server/http_server.h"
#include "coordinator/state/auth.h"

namespace shardctl {
namespace {

// "http://host:port" of a dashboard URL, or "" when it is not plain http://.
std::string Origin(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return "";
  const size_t slash = url.find('/', scheme.size());
  const std::string origin = url.substr(0, slash);
  return origin.size() > scheme.size() ? origin : "";
}

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

std::string DashboardLink(const std::string& url, const std::string& path, const std::string& job) {
  std::string link = Origin(url) + path;
  if (!job.empty()) link += "&next=" + httplib::detail::encode_query_param("/#/job/" + job);
  return link;
}

shard::Status RunDashboard(const ClientOptions& client, const DashboardOptions& opts) {
  const std::string origin = Origin(opts.url);
  if (origin.empty())
    return shard::InvalidArgument("dashboard --url " + opts.url +
                                  ": expected http://HOST:PORT/ (the URL shardd prints as \"dashboard http://...\")");
  std::string token = client.token.empty() ? Env("SHARDD_TOKEN", "") : client.token;
  if (token.empty()) {
    const std::string state_dir = client.state_dir.empty() ? Env("SHARDD_STATE_DIR", ".shardd") : client.state_dir;
    auto t = shardd::ReadAdminToken(state_dir);
    if (!t.ok())
      return shard::Unauthenticated("no token: pass --token, set SHARDD_TOKEN, or point --state-dir at the "
                                    "coordinator's state dir (" + t.status().message() + ")");
    token = *t;
  }
  httplib::Client http(origin);
  http.set_connection_timeout(5);
  http.set_read_timeout(10);
  http.set_bearer_token_auth(token);
  auto res = http.Post("/api/login-link", "", "application/json");
  if (!res)
    return shard::Unavailable("no dashboard answers at " + origin + " (" + httplib::to_string(res.error()) +
                              "); shardd prints its URL at start (\"dashboard http://...\"): pass it with --url");
  std::string error;
  try {
    error = nlohmann::json::parse(res->body).value("error", "");
  } catch (...) {
    error = res->body;
  }
  if (res->status == 401)
    return shard::Unauthenticated("the dashboard at " + origin +
                                  " refused the admin token: is --state-dir (or --token) the coordinator's?");
  if (res->status != 200)
    return shard::Unavailable("the dashboard at " + origin + " answered " + std::to_string(res->status) + ": " + error);
  std::string path;
  try {
    path = nlohmann::json::parse(res->body).at("path").get<std::string>();
  } catch (...) {
    return shard::Internal("the dashboard at " + origin + " sent no login path: " + res->body.substr(0, 200));
  }
  std::printf("%s\n", DashboardLink(opts.url, path, opts.job).c_str());
  std::fprintf(stderr, "shardctl: open the link within %lld s; it logs one browser in, once\n",
               static_cast<long long>(shardd::kLoginLinkTtl.count()));
  return shard::OkStatus();
}

}  // namespace shardctl
