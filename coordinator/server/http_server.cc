#include "coordinator/server/http_server.h"

#include <httplib.h>

#include <map>
#include <sstream>

#include "coordinator/server/coordinator_server.h"
#include "shard/common/logging.h"

namespace shardd {
namespace {

// Label values escape backslash, quote and newline.
std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string RenderMetrics(const std::vector<v1::JobStatus>& jobs) {
  std::ostringstream o;
  o.precision(10);
  std::map<std::string, int> by_state;
  for (v1::JobState s : {v1::QUEUED, v1::LAUNCHING, v1::RUNNING, v1::RESTARTING, v1::SUCCEEDED, v1::FAILED,
                         v1::CANCELLED})
    by_state[JobStateName(s)] = 0;
  for (const auto& j : jobs) ++by_state[JobStateName(j.state())];
  o << "# HELP shardd_jobs Jobs known to the coordinator, by state.\n# TYPE shardd_jobs gauge\n";
  for (const auto& [state, n] : by_state) o << "shardd_jobs{state=\"" << state << "\"} " << n << "\n";
  struct Gauge {
    const char* name;
    const char* help;
    double (*get)(const v1::JobStatus&);
  };
  const Gauge gauges[] = {
      {"shardd_job_step", "Optimizer steps done (rank 0's last report).",
       [](const v1::JobStatus& j) { return static_cast<double>(j.progress().step()); }},
      {"shardd_job_total_steps", "Steps the job trains for.",
       [](const v1::JobStatus& j) { return static_cast<double>(j.progress().total_steps()); }},
      {"shardd_job_loss", "Loss of the last reported step.", [](const v1::JobStatus& j) { return j.progress().loss(); }},
      {"shardd_job_tokens_per_second", "Target tokens per second of the last reported step.",
       [](const v1::JobStatus& j) { return j.progress().tokens_per_s(); }},
      {"shardd_job_attempt", "Current attempt number.",
       [](const v1::JobStatus& j) { return static_cast<double>(j.attempt()); }},
      {"shardd_job_restarts", "Restarts so far.", [](const v1::JobStatus& j) { return static_cast<double>(j.restarts()); }},
      {"shardd_job_last_committed_step", "Newest committed checkpoint step (-1: none).",
       [](const v1::JobStatus& j) { return static_cast<double>(j.progress().last_committed_step()); }},
  };
  for (const Gauge& g : gauges) {
    o << "# HELP " << g.name << " " << g.help << "\n# TYPE " << g.name << " gauge\n";
    for (const auto& j : jobs)
      o << g.name << "{job=\"" << Label(j.id()) << "\",state=\"" << JobStateName(j.state()) << "\"} " << g.get(j)
        << "\n";
  }
  o << "# HELP shardd_worker_heartbeat_age_seconds Seconds since a worker's last heartbeat.\n"
       "# TYPE shardd_worker_heartbeat_age_seconds gauge\n";
  for (const auto& j : jobs)
    for (const auto& w : j.workers())
      if (w.last_heartbeat_age_s() >= 0)
        o << "shardd_worker_heartbeat_age_seconds{job=\"" << Label(j.id()) << "\",rank=\"" << w.rank() << "\"} "
          << w.last_heartbeat_age_s() << "\n";
  return o.str();
}

shard::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen, bool allow_insecure,
                                                               JobManager* jobs) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return shard::InvalidArgument("--http-listen " + listen + ": expected host:port");
  const std::string host = listen.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
    return shard::InvalidArgument("--http-listen " + listen + ": the port is not a number");
  }
  if (!IsLoopbackAddress(listen) && !allow_insecure)
    return shard::FailedPrecondition("--http-listen " + listen +
                                     " is not a loopback address (metrics are unauthenticated); use --allow-insecure "
                                     "if the network is trusted");
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  s->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s->server_->Get("/metrics", [jobs](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderMetrics(jobs->List(/*include_finished=*/true)), "text/plain; version=0.0.4");
  });
  s->port_ = port == 0 ? s->server_->bind_to_any_port(host) : (s->server_->bind_to_port(host, port) ? port : -1);
  if (s->port_ <= 0) return shard::Unavailable("cannot listen on " + listen + " for HTTP (address in use?)");
  httplib::Server* raw = s->server_.get();
  s->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  LOG_INFO("shardd HTTP (/healthz, /metrics) on {}:{}", host, s->port_);
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shardd
